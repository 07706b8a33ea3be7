"""A throw-away S3 endpoint (moto's standalone server) for tests.

The module-scoped fixture ``s3_endpoint`` (tests/conftest.py) starts it for a test module::

    def test_x(s3_endpoint):
        bucket = s3_server.create_bucket(s3_endpoint)  # fresh bucket name
        store = Store(f"s3://{bucket}/prefix")

While the fixture is active, ``os.environ`` holds AWS_ENDPOINT_URL and fake
credentials, so processes started then (Ray workers included) reach the same
server; ``s3_server.aws_env_vars(endpoint)`` returns those variables for a
``runtime_env={"env_vars": ...}``. Outside pytest use ``moto_server()`` and
``aws_env(endpoint)`` as context managers.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

#: Variables that could point the AWS SDKs elsewhere; cleared and restored around tests.
AWS_VARS = (
    "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_EC2_METADATA_DISABLED",
)


@contextmanager
def moto_server() -> Iterator[str]:
    """Run moto's S3 server on a free local port; yield its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def aws_env_vars(endpoint: str) -> dict[str, str]:
    """The environment that points boto3 and pyarrow at ``endpoint`` with fake credentials."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextmanager
def aws_env(endpoint: str) -> Iterator[dict[str, str]]:
    """Set ``aws_env_vars(endpoint)`` in ``os.environ`` (other AWS_* cleared); restore on exit."""
    saved = {k: os.environ.get(k) for k in AWS_VARS}
    for k in AWS_VARS:
        os.environ.pop(k, None)
    env = aws_env_vars(endpoint)
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def create_bucket(endpoint: str, name: str | None = None) -> str:
    """Create a bucket (a fresh name by default) on ``endpoint``; return its name."""
    import boto3

    name = name or f"qkgeom-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name
