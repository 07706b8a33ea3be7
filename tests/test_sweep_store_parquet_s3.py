"""The store on S3 (moto's standalone server): round trip, plain pandas, validate, compact, errors."""

from __future__ import annotations

import socket

import pandas as pd
import pyarrow.fs as pafs
import pytest
import s3_server
from store_helpers import age, columns_on_disk, fill, layer_rows

from sweep.store import Store, StoreError, compact, validate


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_files(endpoint: str, prefix: str) -> list[str]:
    fs = pafs.S3FileSystem(endpoint_override=endpoint, region="us-east-1")
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def test_round_trip_and_plain_pandas(s3_endpoint: str) -> None:
    bucket = s3_server.create_bucket(s3_endpoint)
    store = Store(f"s3://{bucket}/prefix")
    store.check_writable()
    fill(store, seeds=2, epochs=2)
    df = store.read("layers")
    assert len(df) == 8 and df["pr_q"].tolist()[:2] == [1.0, 2.0]
    assert sorted(set(df.loc[df["run_id"] == df["run_id"][0], "epoch"])) == [0, 1]
    files = s3_files(s3_endpoint, f"{bucket}/prefix")
    assert not any("inprogress" in f or "_probe" in f for f in files)
    assert f"{bucket}/prefix/layers/{df['run_id'][0]}/epoch-0001.parquet" in files
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, region="us-east-1")
    plain = pd.read_parquet(f"{bucket}/prefix/layers", filesystem=fs)
    pd.testing.assert_frame_equal(plain.sort_values(["run_id", "epoch", "layer"]).reset_index(drop=True), df)


def test_validate_and_compact_on_s3(s3_endpoint: str) -> None:
    bucket = s3_server.create_bucket(s3_endpoint)
    store = Store(f"s3://{bucket}/sweeps")
    fill(store, seeds=2, epochs=3)
    before = store.read("layers")
    assert validate(store).ok
    report = compact(store)
    assert report.dirs == 4 and report.files_removed == 12
    pd.testing.assert_frame_equal(store.read("layers"), before)
    assert len([f for f in s3_files(s3_endpoint, f"{bucket}/sweeps/layers")]) == 2
    store.write_layers(layer_rows(1, value=5.0))
    after = store.read("layers")
    assert len(after) == len(before) and after.loc[after["epoch"] == 1, "pr_q"].tolist()[:1] == [5.1]
    assert validate(store).ok


def test_old_store_on_s3_reads_validates_and_compacts_to_condition(s3_endpoint: str) -> None:
    bucket = s3_server.create_bucket(s3_endpoint)
    store = Store(f"s3://{bucket}/old")
    fill(store, seeds=1, epochs=2)
    before = store.read("layers")
    assert age(store) == 4 and "intervention" in columns_on_disk(store, "layers")
    pd.testing.assert_frame_equal(store.read("layers"), before)  # read as ``condition``
    assert validate(store).ok
    compact(store)
    assert "condition" in columns_on_disk(store, "layers") and "intervention" not in columns_on_disk(store, "layers")
    pd.testing.assert_frame_equal(store.read("layers"), before)


def test_missing_bucket_is_a_store_error(s3_endpoint: str) -> None:
    store = Store("s3://no-such-bucket-qkgeom/prefix")
    with pytest.raises(StoreError, match=r"s3://no-such-bucket-qkgeom/prefix.*(?i:bucket)"):
        store.check_writable()


def test_unreachable_endpoint_is_a_store_error(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(StoreError, match=r"not writable.*(?i:connect)"):
        Store("s3://bucket/prefix", retries=1).check_writable()  # one try: the same error, without backoff
