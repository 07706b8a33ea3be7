"""The sweep's elapsed/remaining-time line (sweep.progress)."""

from sweep.progress import eta_line, format_duration


def test_format_duration():
    assert format_duration(0) == "0 s"
    assert format_duration(59.6) == "1 min 00 s"
    assert format_duration(75) == "1 min 15 s"
    assert format_duration(3725) == "1 h 02 min"


def test_eta_scales_the_elapsed_time_by_the_epochs_left():
    # 120 of 720 epochs in 130 s: 600 left at 120 per 130 s = 650 s
    assert eta_line(120, 720, 130.0) == "elapsed 2 min 10 s · 120/720 epochs · about 10 min 50 s left"


def test_eta_counts_only_epochs_trained_since_a_resume():
    # 360 were done before the restart; 60 more in 60 s leaves 300 at 1 per s
    assert eta_line(420, 720, 60.0, epochs_at_start=360).endswith("about 5 min 00 s left")


def test_no_estimate_before_the_first_epoch():
    assert eta_line(0, 720, 5.0).endswith("remaining time: after the first epoch")
    assert eta_line(360, 720, 5.0, epochs_at_start=360).endswith("after the first epoch")
