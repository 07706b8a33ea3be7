"""``sweep.report --out`` writes wherever a store can be (moto S3 here) and refuses what it cannot write."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest
import s3_server

from sweep import report
from sweep.synthetic import make_synthetic_store, write_store


def test_report_out_on_s3(s3_endpoint, tmp_path, capsys) -> None:
    root = tmp_path / "store"
    write_store(make_synthetic_store(n_seeds=2, epochs=3, iv_epochs=2), root)
    bucket = s3_server.create_bucket(s3_endpoint)
    assert report.main(["--store", str(root), "--out", f"s3://{bucket}/report", "--no-figures"]) == 0
    assert f"s3://{bucket}/report/report.md" in capsys.readouterr().out
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, region="us-east-1")
    files = {i.path for i in fs.get_file_info(pafs.FileSelector(f"{bucket}/report", recursive=True))
             if i.type == pafs.FileType.File}
    assert {f"{bucket}/report/report.md", f"{bucket}/report/stats.json"} <= files
    assert any(f.startswith(f"{bucket}/report/tables/") for f in files)
    with fs.open_input_stream(f"{bucket}/report/report.md") as f:
        assert f.read().startswith(b"#")
    assert not list(tmp_path.glob("s3*"))  # no local folder named "s3:"


def test_report_out_to_a_missing_bucket_is_refused_before_the_report(s3_endpoint, tmp_path, capsys) -> None:
    root = tmp_path / "store"
    root.mkdir()
    with pytest.raises(SystemExit) as exc:
        report.main(["--store", str(root), "--out", "s3://no-such-bucket-qk/report"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m sweep.report: error:") and "no-such-bucket-qk" in err
