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


# --- the reporter: one line by default, Tune's table with --progress-tables ---------------------

class _Trial:
    def __init__(self, status: str, epoch: int | None = None) -> None:
        self.status, self.last_result = status, ({"epoch": epoch} if epoch is not None else {})


TRIALS = [_Trial("TERMINATED"), _Trial("RUNNING", 2), _Trial("RUNNING", 1), _Trial("PENDING")]


def test_status_counts_and_progress_line():
    from sweep.progress import progress_line, status_counts

    assert status_counts([t.status for t in TRIALS]) == "2 running · 1 done · 1 pending"
    assert status_counts(["ERROR", "WEIRD"]) == "1 failed · 1 other"
    assert progress_line(["PENDING"], "elapsed 0 s") == "trials 1 pending of 1 · elapsed 0 s"


def test_reporter_is_one_line_by_default(capsys, monkeypatch):
    from ray import tune

    from sweep.progress import EtaReporter

    tables = []
    monkeypatch.setattr(tune.CLIReporter, "report", lambda self, *a: tables.append(a))
    EtaReporter(epochs_per_trial=4, n_trials=4).report(TRIALS, False)
    out = capsys.readouterr().out.splitlines()
    assert tables == [] and len(out) == 1
    # 4 (done) + 2 + 1 of 16 epochs, none trained since the start: no estimate yet
    assert out[0].startswith("trials 2 running · 1 done · 1 pending of 4 · elapsed ") and "7/16 epochs" in out[0]

    EtaReporter(epochs_per_trial=4, n_trials=4, tables=True).report(TRIALS, False)
    out = capsys.readouterr().out.splitlines()
    assert len(tables) == 1 and len(out) == 1 and out[0].startswith("elapsed ")  # the table, then the eta


def test_progress_tables_flag_reaches_the_settings():
    from sweep import baseline
    from sweep.settings import settings_from_args

    for flags, want in (([], False), (["--progress-tables"], True)):
        assert settings_from_args(baseline.parse(flags), "x").progress_tables is want


def test_tunes_warning_about_trials_that_never_started_is_kept_off_the_console(caplog):
    """Tune's own warning (``ExperimentAnalysis._fetch_trial_dataframes``) for a trial without result
    files is dropped; another failure in the same warning stays, and so does every other message."""
    import logging

    from ray.tune.analysis.experiment_analysis import ExperimentAnalysis

    from sweep.progress import ANALYSIS_LOGGER, quiet_never_started

    class Stub:
        def __init__(self, trials, errors):
            self.trials, self.errors = trials, errors

        def _fetch_trial_dataframe(self, trial):
            raise self.errors[trial.trial_id]

    class Trial:
        def __init__(self, trial_id):
            self.trial_id = trial_id

        def __str__(self):
            return f"train_cell_{self.trial_id}"

    missing = FileNotFoundError("Could not fetch metrics for train_cell_a: both result.json and progress.csv were "
                                "not found at /tmp/x")
    quiet_never_started()
    quiet_never_started()  # once
    assert sum(type(f).__name__ == "NeverStartedFilter" for f in logging.getLogger(ANALYSIS_LOGGER).filters) == 1
    with caplog.at_level(logging.WARNING, logger=ANALYSIS_LOGGER):
        ExperimentAnalysis._fetch_trial_dataframes(Stub([Trial("a")], {"a": missing}))
        assert not caplog.records
        ExperimentAnalysis._fetch_trial_dataframes(Stub([Trial("a"), Trial("b")],
                                                        {"a": missing, "b": ValueError("bad json")}))
        (record,) = caplog.records
        assert record.getMessage() == "Failed to fetch metrics for 1 trial(s):\n- train_cell_b: ValueError('bad json')"
        logging.getLogger(ANALYSIS_LOGGER).warning("something else")
        assert caplog.records[-1].getMessage() == "something else"
