"""``skslot bench`` on one's own tables: options, the given split, per-client results, warnings."""

import csv
import dataclasses
import io
import json
import warnings

import numpy as np
import pandas as pd
import pytest
import skslot_bench.cli
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from skslot_bench import (
    BASELINES,
    DEFAULT_HEADS,
    BenchmarkConfig,
    BenchmarkWarning,
    run_benchmark,
)
from skslot_bench._run import _Progress

from skslot.cli import build_parser, main
from skslot.datasets import dirichlet_partition, load_table, make_federated_classification
from skslot.flower.config import DeploymentConfig
from skslot.heads import FedCGSClassifier, FedPFTClassifier

SITES = np.array(["north", "south", "east"])
ANIMALS = np.array(["cat", "dog", "eel", "fox"])
CLINIC = {"n_clients": 3, "n_samples_per_client": 100, "n_features": 8, "n_classes": 4}
CLINIC |= {"alpha": None, "domain_shift": 1.5}


def clinic_frame(seed: int = 0) -> pd.DataFrame:
    """300 rows from 3 sites with a domain shift, string labels and clients, a split column."""
    data = make_federated_classification(**CLINIC, random_state=seed)
    frame = pd.DataFrame(data.X, columns=[f"f{j}" for j in range(8)])
    frame["animal"] = ANIMALS[data.y]
    frame["site"] = SITES[data.client]
    frame["part"] = np.where(np.random.default_rng(seed).random(len(frame)) < 0.25, "test", "train")
    frame["note"] = "free text"  # a non-numeric column that is not a feature
    return frame


@pytest.fixture
def clinic_csv(tmp_path):
    path = tmp_path / "clinic.csv"
    clinic_frame().to_csv(path, index=False)
    return path


FAST = ["--heads", "FedCGS", "--taus", "0,0.4", "--main-tau", "0.4", "--n-jobs", "1", "--quiet"]


def results(out_dir) -> list[dict]:
    return list(csv.DictReader(io.StringIO((out_dir / "results.csv").read_text())))


def test_a_csv_with_string_labels_and_clients_runs_with_per_client_outputs(
    clinic_csv, tmp_path, capsys
):
    out = tmp_path / "out"
    args = ["bench", "--data", str(clinic_csv), "--label", "animal", "--client", "site"]
    args += ["--features", "f", "--alphas", "0.1,none", "--seeds", "2", "--out", str(out)]
    assert main([*args, *FAST]) == 0
    printed = capsys.readouterr()
    assert "| 0.1 | FedCGS |" in printed.out and "auto" in printed.out
    assert "300 rows x 8 features, 3 clients (domains), 4 classes" in printed.err
    rows = results(out)
    assert {r["domain"] for r in rows} == set(SITES)  # the client names, not codes
    assert {r["n_test"] for r in rows} == {"30"}  # round(0.3 * 25) of each class per site
    summary = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["alpha"], sorted(r["per_client"])) for r in summary] == [
        (a, sorted(SITES)) for a in (0.1, "none")
    ]
    north = summary[0]["per_client"]["north"]
    fixed = [
        r
        for r in rows
        if (r["alpha"], r["domain"], r["selection"], r["case"])
        == ("0.1", "north", "fixed", "domain")
    ]
    for tau, key in (("0.0", "without_slot"), ("0.4", "with_slot")):
        accuracy = [100 * float(r["accuracy"]) for r in fixed if r["tau"] == tau]
        assert north[key] == pytest.approx(np.mean(accuracy))
    assert north["gain"] == pytest.approx(north["with_slot"] - north["without_slot"])
    markdown = (out / "summary.md").read_text()
    assert "## Accuracy per client (%), mean +- std over seeds" in markdown
    assert (
        "| 0.1 | FedCGS | north | 30 |" in markdown and "| none | FedCGS | east | 30 |" in markdown
    )


def test_each_degenerate_shop_gets_one_clear_message(tmp_path, capsys):
    """Four shops as given: one with no training row, one with a single row, a class that
    only one shop trained; each said once, naming the shop, over every seed and head."""
    frame = clinic_frame()
    frame["site"] = np.where(np.arange(len(frame)) % 10 == 0, "west", frame["site"])
    west, south = (frame["site"] == "west").to_numpy(), (frame["site"] == "south").to_numpy()
    frame.loc[west, "part"] = "test"  # west: 0 training rows
    frame.loc[south, "part"] = "test"
    frame.loc[np.flatnonzero(south)[0], "part"] = "train"  # south: 1 training row
    fox = (frame["animal"] == "fox").to_numpy()
    frame.loc[fox & (frame["site"] != "north").to_numpy(), "part"] = "test"  # fox: north only
    path = tmp_path / "shops.csv"
    frame.to_csv(path, index=False)
    args = ["bench", "--data", str(path), "--label", "animal", "--client", "site"]
    args += ["--split-column", "part", "--skew", "none", "--seeds", "2", "--no-auto"]
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main([*args, "--out", str(tmp_path / "out"), *FAST]) == 0
    printed = capsys.readouterr()
    said = [line for line in printed.err.splitlines() if "DataWarning" in line]
    assert said == [
        "skslot bench: DataWarning: client 'south' has 1 training row(s) as given: it takes no "
        "part in training, its test rows are scored unaligned (2 of 2 runs)",
        "skslot bench: DataWarning: client 'west' has 0 training row(s) as given: it takes no "
        "part in training, its test rows are scored unaligned (2 of 2 runs)",
        "skslot bench: DataWarning: class(es) trained by one client only as given: class 'fox' "
        "by client 'north'; the heads learn each from that client's domain (2 of 2 runs)",
    ]
    # both per-client tables, each naming its case
    assert "Accuracy per client (%), mean +- std over seeds: Each client's own label mix" in (
        printed.out
    )
    assert "Accuracy per client (%), mean +- std over seeds: Every class of each domain" in (
        printed.out
    )


@pytest.mark.parametrize(
    ("column", "split_args"),
    [("split", ["--split", "given"]), ("part", ["--split-column", "part"])],
)
def test_given_split_and_no_skew_use_exactly_the_users_rows(tmp_path, capsys, column, split_args):
    frame = clinic_frame().rename(columns={"part": column})
    path = tmp_path / "clinic.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "out"
    args = ["bench", "--data", str(path), "--label", "animal", "--client", "site"]
    args += [*split_args, "--skew", "none", "--seeds", "1", "--no-auto", "--out", str(out)]
    assert main([*args, *FAST]) == 0
    printed = capsys.readouterr()
    is_test = (frame[column] == "test").to_numpy()
    assert f"given split ({is_test.sum()} test rows)" in printed.err
    assert "Accuracy per client" in printed.out  # one alpha: the client table is printed too
    # "none" is the skew drawn, not the clients' mixes (the user's own, skewed or not)
    assert f"alpha none: no skew drawn; each client's label mix is the one {path} holds" in (
        printed.out
    )
    rows = results(out)
    assert {r["alpha"] for r in rows} == {"none"}
    assert {int(r["n_train"]) for r in rows} == {int((~is_test).sum())}
    for site in SITES:
        n_test = int((is_test & (frame["site"] == site)).sum())
        assert {int(r["n_test"]) for r in rows if r["domain"] == site} == {n_test}
    # without SLOT, FedCGS (deterministic) trained on the user's training rows, tested on theirs
    X = frame[[f"f{j}" for j in range(8)]].to_numpy()
    head = FedCGSClassifier().fit(
        X[~is_test], frame["animal"][~is_test], client=frame["site"][~is_test]
    )
    correct = head.predict(X[is_test]) == frame["animal"][is_test].to_numpy()
    for site in SITES:
        expected = correct[(frame["site"][is_test] == site).to_numpy()].mean()
        (found,) = [
            r
            for r in rows
            if (r["domain"], r["tau"], r["selection"], r["case"])
            == (site, "0.0", "fixed", "domain")
        ]
        assert float(found["accuracy"]) == pytest.approx(expected)


def test_the_partition_keeps_the_given_test_rows_and_skews_only_the_training_rows():
    table = load_table(clinic_frame(), label="animal", client="site", split="part")
    mask = table.is_test
    part = dirichlet_partition(table.y, table.client, alpha=None, test_mask=mask, random_state=0)
    np.testing.assert_array_equal(np.sort(part.test_index), np.flatnonzero(mask))
    np.testing.assert_array_equal(np.sort(part.train_index), np.flatnonzero(~mask))
    np.testing.assert_array_equal(
        part.client_domain[part.test_client], table.client[part.test_index]
    )
    skewed = dirichlet_partition(
        table.y, table.client, alpha=0.1, clients_per_domain=2, test_mask=mask, random_state=0
    )
    np.testing.assert_array_equal(np.sort(skewed.test_index), np.flatnonzero(mask))
    assert len(skewed.train_index) < (~mask).sum() and not mask[skewed.train_index].any()
    for bad, message in (
        (np.zeros(len(mask), dtype=bool), "marks no row as a test row"),
        (mask.astype(int), "test_mask must be a boolean array"),
    ):
        with pytest.raises(ValueError, match=message):
            dirichlet_partition(table.y, table.client, test_mask=bad)


def test_dataframe_and_parquet_give_the_csv_results(clinic_csv, tmp_path, capsys):
    frame = clinic_frame()
    config = BenchmarkConfig(
        alphas=(None,), taus=(0.0, 0.4), seeds=(0,), heads=("FedCGS",), auto=False
    )
    table = load_table(frame, label="animal", client="site", split="part")
    records = run_benchmark(table, config, progress=False)
    by_frame = {(r["domain"], r["tau"], r["selection"]): r["accuracy"] for r in records}
    assert {r["n_test"] for r in records if r["domain"] == "north"} == {
        int(((frame["part"] == "test") & (frame["site"] == "north")).sum())
    }
    # config.split: None uses the table's split, "random" the paper's 70/30 split
    random_split = run_benchmark(table, BenchmarkConfig(**{**config.__dict__, "split": "random"}))
    assert {r["n_test"] for r in random_split} == {30}
    with pytest.raises(ValueError, match="split='given' needs the data's own train/test column"):
        run_benchmark(
            load_table(frame, label="animal", client="site"),
            BenchmarkConfig(**{**config.__dict__, "split": "given"}),
        )
    pytest.importorskip("pyarrow", reason="pyarrow is not installed")
    path = tmp_path / "clinic.parquet"
    frame.to_parquet(path, index=False)
    out = tmp_path / "out"
    args = ["bench", "--data", str(path), "--label", "animal", "--client", "site"]
    args += ["--split-column", "part", "--skew", "none", "--seeds", "1", "--no-auto"]
    assert main([*args, *FAST, "--out", str(out)]) == 0
    by_file = {
        (r["domain"], float(r["tau"]), r["selection"]): float(r["accuracy"]) for r in results(out)
    }
    assert by_file == pytest.approx(by_frame)


def test_features_are_a_prefix_or_a_list():
    parse = build_parser().parse_args
    assert parse(["bench", "--features", "f"]).features == "f"
    assert parse(["bench", "--features", "f0, f3"]).features == ["f0", "f3"]
    assert parse(["bench", "--features", "age,"]).features == ["age"]


def test_usage_errors_come_before_any_work(clinic_csv, tmp_path, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the data were read")

    monkeypatch.setattr(skslot_bench.cli, "_load", never)
    np.savez(tmp_path / "arrays.npz", X=np.eye(3), y=np.arange(3), domain=np.arange(3))
    table = str(clinic_csv)
    cases = [
        ([], f"--data {table} is a table: name its columns with --label COL and --client COL"),
        (["--label", "animal"], f"--data {table} is a table: name its columns with --client COL"),
        (["--client", "site"], f"--data {table} is a table: name its columns with --label COL"),
    ]
    for extra, message in cases:
        assert main(["bench", "--data", table, *extra]) == 2
        err = capsys.readouterr().err
        assert err == f"skslot bench: {message}\n", err
    missing = tmp_path / "missing.csv"
    other = [
        (["--data", str(missing)], f"skslot bench: --data {missing}: no such file"),
        (["--data", "notes.txt"], "neither an embedded data set (digits, office-caltech10)"),
        (["--label", "y"], "--label: only for a .csv or .parquet file, not the embedded 'digits'"),
        (["--data", "office-caltech10", "--split", "given"], "has no train/test column"),
        (["--data", str(tmp_path / "arrays.npz"), "--client", "c"], "an .npz holds arrays X"),
        (["--skew", "none", "--alphas", "0.1"], "--skew none keeps the clients as they are"),
        (["--data", table, "--split", "random", "--split-column", "part"], "leave out --split"),
        (["--taus", "0.4,1"], "--taus must include 0"),
    ]
    for args, message in other:
        assert main(["bench", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_content_errors_are_one_line_naming_the_file(clinic_csv, capsys):
    args = ["bench", "--data", str(clinic_csv), "--label", "animal", "--client", "site"]
    assert main([*args, "--split", "given", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"skslot bench: cannot read --data {clinic_csv}: {clinic_csv}: ")
    assert "no split column 'split'" in err and err.count("\n") == 1
    assert main([*args, "--features", "note,", "--quiet"]) == 2
    assert "feature column 'note' is not numeric" in capsys.readouterr().err


def slow_fedpft(seed: int) -> FedPFTClassifier:
    """FedPFT whose server classifier stops after one L-BFGS step: a ConvergenceWarning each fit."""
    return FedPFTClassifier(estimator=LogisticRegression(max_iter=1), random_state=seed)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_warnings_of_the_runs_are_reported_once_after_the_progress(n_jobs, capsys):
    data = make_federated_classification(
        n_clients=3, n_samples_per_client=80, n_features=6, n_classes=3, random_state=0
    )
    frame = pd.DataFrame(data.X).add_prefix("f").assign(y=data.y, c=data.client)
    table = load_table(frame, label="y", client="c")
    config = BenchmarkConfig(
        alphas=(None,), taus=(0.0, 0.4), seeds=(0, 1), heads=("slow",), auto=False, n_jobs=n_jobs
    )
    # one fit per tau and seed, and the own-mix case's alignment
    config = dataclasses.replace(config, baselines=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = run_benchmark(table, config, factories={"slow": slow_fedpft})
    assert {r["head"] for r in records} == {"slow"}
    (summary,) = caught  # one warning, not one per fit
    assert summary.category is BenchmarkWarning
    assert str(summary.message).startswith(
        "6 warnings from the runs: ConvergenceWarning x6 (lbfgs failed to converge"
    )
    err = capsys.readouterr().err
    assert "[1/2]" in err and "[2/2]" in err and "Warning" not in err
    with warnings.catch_warnings(record=True) as caught:  # the caller's filters still apply
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", ConvergenceWarning)
        run_benchmark(table, config, factories={"slow": slow_fedpft}, progress=False)
    assert caught == []


def test_the_cli_prints_one_warning_line_at_the_end(clinic_csv, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(DEFAULT_HEADS, "FedPFT", slow_fedpft)
    args = ["bench", "--data", str(clinic_csv), "--label", "animal", "--client", "site"]
    args += ["--skew", "none", "--seeds", "2", "--taus", "0,0.4", "--main-tau", "0.4"]
    args += ["--heads", "FedPFT"]
    assert main([*args, "--no-auto", "--n-jobs", "1", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert "--features not given" in lines[1]  # after the data's line: what the features are
    assert [line.split(" (")[0] for line in lines[2:4]] == [
        "[1/2] clinic alpha=none seed=0",
        "[2/2] clinic alpha=none seed=1",
    ]
    # seeds x (taus + the own-mix case's alignment + baselines), one warning each
    fits = 2 * (2 + 1 + len(BASELINES))
    assert lines[-1].startswith(
        f"skslot bench: {fits} warnings from the runs: ConvergenceWarning x{fits} (lbfgs failed"
    )
    assert sum("ConvergenceWarning" in line for line in lines) == 1 and len(lines) == 5


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_rewrites_one_line_in_a_terminal_and_prints_lines_elsewhere():
    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        progress = _Progress(3, "clinic", stream)
        for done in (1, 2, 3):
            progress.update(done, 0.1, done - 1)
        progress.close()
    shown = terminal.getvalue()
    assert shown.count("\r") == 3 and shown.count("\n") == 1 and shown.endswith("\n")
    assert "#######....." in shown and "[2/3] clinic alpha=0.1 seed=1" in shown
    assert "s left)" in shown
    lines = log.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        f"[{i}/3] clinic alpha=0.1 seed={i - 1}" for i in (1, 2, 3)
    ]


def test_flower_app_help_shows_each_setting_from_its_declaration(capsys):
    with pytest.raises(SystemExit) as info:
        main(["flower-app", "--help"])
    assert info.value.code == 0
    shown = "".join(capsys.readouterr().out.split())  # wrapped as the terminal's width allows
    for s in DeploymentConfig.settings():
        assert f"--{s.key}" in shown
        assert "".join(s.help.split()) in shown, s.name
        assert "".join(f"default: {s.shown_default})".split()) in shown, s.name
    for part in DeploymentConfig.parts().values():
        assert part.__name__.removesuffix("Settings").lower() + "settings:" in shown


def test_flower_app_options_are_the_run_config_and_a_bad_one_names_its_key(tmp_path, capsys):
    tomllib = pytest.importorskip("tomllib")
    options = ["--tau", "auto", "--mean-tau", "none", "--selection-rule", "best"]
    options += ["--seed", "3", "--defence", "false", "--screen", "off", "--head", "O-FedAvg"]
    assert main(["flower-app", str(tmp_path), *options]) == 0
    written = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    assert DeploymentConfig.from_run_config(written["tool"]["flwr"]["app"]["config"]) == (
        DeploymentConfig(
            tau="auto", mean_tau=None, selection_rule="best", seed=3, defence=False,
            screen="off", head="O-FedAvg",
        )
    )  # fmt: skip
    capsys.readouterr()
    for option, value, message in [
        ("--selection-rule", "max", "selection_rule must be one of 'one-standard-error', 'best'"),
        ("--seed", "three", "seed must be a non-negative integer, got 'three'"),
        ("--tau", "2", "tau must be in [0, 1] or 'auto' or 'default', got 2.0"),
    ]:
        assert main(["flower-app", str(tmp_path), option, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"skslot flower-app: {message}") and err.count("\n") == 1, err
        assert f"(run-config key '{option[2:]}')" in err


def test_bench_summary_covariance_defaults_to_the_configs(capsys):
    parse = build_parser().parse_args
    assert parse(["bench"]).summary_covariance == BenchmarkConfig.summary_covariance == "total"
    assert parse(["bench", "--summary-covariance", "within"]).summary_covariance == "within"
    with pytest.raises(SystemExit):
        parse(["bench", "--covariance", "within"])  # one name per option
    assert "unrecognized arguments: --covariance" in capsys.readouterr().err


def test_the_bench_says_which_columns_it_used_as_features(tmp_path, capsys):
    """Without --features every numeric column is a feature: a line says so, naming them;
    summary.json lists the features either way."""
    frame = clinic_frame().assign(age=np.arange(300) % 90)  # numeric, not a feature
    path = tmp_path / "clinic.csv"
    frame.to_csv(path, index=False)
    args = ["bench", "--data", str(path), "--label", "animal", "--client", "site"]
    args += ["--alphas", "none", "--seeds", "1", *FAST]
    out = tmp_path / "every"
    assert main([*args, "--out", str(out)]) == 0
    (line,) = [s for s in capsys.readouterr().err.splitlines() if "--features not given" in s]
    assert "is one of the 9 features (f0, f1, ..., and age besides)" in line
    used = json.loads((out / "summary.json").read_text())["data"]
    assert used["features"] == [f"f{j}" for j in range(8)] + ["age"]
    chosen = tmp_path / "chosen"
    assert main([*args, "--features", "f", "--out", str(chosen)]) == 0
    err = capsys.readouterr().err
    assert "--features not given" not in err
    assert "skslot bench: features: f0, f1, f2, f3, f4, f5, f6, f7\n" in err
    used = json.loads((chosen / "summary.json").read_text())["data"]
    settings = used.pop("settings")
    assert used == {"name": "clinic", "rows": 300, "features": [f"f{j}" for j in range(8)]}
    shown = (settings["heads"], settings["taus"], settings["main_tau"])
    assert shown == (["FedCGS"], [0, 0.4], 0.4)


def test_a_resumed_bench_runs_only_what_is_missing_and_tables_all_of_it(
    clinic_csv, tmp_path, capsys
):
    """Two parts with --resume give the records and tables of one run of both; a part with
    other settings is refused."""
    args = ["bench", "--data", str(clinic_csv), "--label", "animal", "--client", "site"]
    args += ["--features", "f", "--seeds", "2", *FAST]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert main([*args, "--alphas", "0.1,none", "--out", str(whole)]) == 0
    assert main([*args, "--alphas", "0.1", "--out", str(parts), "--resume"]) == 0
    assert "0 runs in" in capsys.readouterr().err
    assert {r["alpha"] for r in results(parts)} == {"0.1"}
    assert main([*args, "--alphas", "0.1,none", "--out", str(parts), "--resume"]) == 0
    printed = capsys.readouterr()
    assert "2 runs in" in printed.err  # the two seeds of alpha 0.1, not run again
    assert "| none | FedCGS |" in printed.out
    timing = "slot_cpu_seconds"
    for got, want in zip(results(parts), results(whole), strict=True):
        assert {**got, timing: 0} == {**want, timing: 0}
    summary = json.loads((parts / "summary.json").read_text())
    want = json.loads((whole / "summary.json").read_text())
    assert summary["data"] == want["data"]
    assert [r["alpha"] for r in summary["rows"]] == [0.1, "none"]
    assert summary["rows"] == want["rows"]
    other = ["--alphas", "none", "--out", str(parts), "--resume", "--client-tau", "uniform"]
    assert main([*args, *other]) == 2
    assert "other settings" in capsys.readouterr().err


def test_a_text_cell_in_a_feature_column_is_refused_naming_column_and_row(tmp_path, capsys):
    """Without --features a column of numbers with one typo is a feature with a bad cell, not
    a column to drop silently."""
    frame = clinic_frame()
    frame["f5"] = frame["f5"].astype(object)
    frame.loc[17, "f5"] = "abc"
    path = tmp_path / "clinic.csv"
    frame.to_csv(path, index=False)
    args = ["bench", "--data", str(path), "--label", "animal", "--client", "site"]
    assert main([*args, "--alphas", "none", "--seeds", "1", *FAST]) == 2
    err = capsys.readouterr().err
    assert "feature column 'f5' is not numeric" in err and "row 17 holds 'abc'" in err
    with pytest.raises(ValueError, match="feature column 'f5' is not numeric"):
        load_table(path, label="animal", client="site")
    # a text column (most cells not numbers) is still no feature
    assert "note" not in load_table(clinic_frame(), label="animal", client="site").feature_names


def test_a_split_column_is_used_by_default_and_said_so(tmp_path, capsys):
    frame = clinic_frame().rename(columns={"part": "split"})
    path = tmp_path / "clinic.csv"
    frame.to_csv(path, index=False)
    args = ["bench", "--data", str(path), "--label", "animal", "--client", "site"]
    args += ["--skew", "none", "--seeds", "1", "--no-auto", *FAST]
    assert main([*args, "--out", str(tmp_path / "given")]) == 0
    err = capsys.readouterr().err
    assert "has a 'split' column: its test rows are tested" in err
    n_test = int((frame["split"] == "test").sum())
    assert f"given split ({n_test} test rows)" in err
    assert main([*args, "--split", "random", "--out", str(tmp_path / "random")]) == 0
    err = capsys.readouterr().err
    assert "--split random: the 'split' column" in err and "is not used" in err


def test_a_client_of_one_row_is_refused_with_the_estimators_message(tmp_path, capsys):
    frame = clinic_frame()
    frame.loc[0, "site"] = "toys"
    path = tmp_path / "clinic.csv"
    frame.to_csv(path, index=False)
    args = ["bench", "--data", str(path), "--label", "animal", "--client", "site"]
    assert main([*args, "--alphas", "none", "--seeds", "1", *FAST]) == 2
    message = "client 'toys' has 1 sample; at least 2 are needed to estimate a covariance"
    assert message in capsys.readouterr().err
    from skslot import SLOTTransformer

    X = frame[[f"f{j}" for j in range(8)]].to_numpy()
    with pytest.raises(ValueError, match=message):
        SLOTTransformer().fit(X, frame["animal"], client=frame["site"])


@pytest.mark.filterwarnings("ignore::skslot.exceptions.UnknownClientWarning")
def test_a_client_the_skew_leaves_without_rows_is_named():
    """A Dirichlet draw may leave a client no training rows: the run says which."""
    from skslot_bench import BenchmarkConfig
    from skslot_bench._run import evaluate_run

    data = make_federated_classification(
        n_clients=4, n_samples_per_client=30, n_features=4, n_classes=4, alpha=None,
        random_state=0,
    )  # fmt: skip
    from skslot.datasets import DomainDataset

    dataset = DomainDataset(
        data.X, data.y, data.client, np.array(["a", "b", "c", "toys"]),
        np.array(["w", "x", "y", "z"]), "shops",
    )  # fmt: skip
    config = BenchmarkConfig(alphas=(0.001,), taus=(0.0,), seeds=(0,), heads=("FedCGS",))
    named = set()
    for seed in range(20):
        part = dirichlet_partition(data.y, data.client, alpha=0.001, random_state=seed)
        if not part.empty_clients:
            continue
        with pytest.warns(UserWarning, match="training row\\(s\\) after the skew") as caught:
            evaluate_run(dataset, data.X, 0.001, seed, config)
        named |= {
            str(w.message).split("'")[1] for w in caught if "after the skew" in str(w.message)
        }
        expected = {dataset.domains[part.client_domain[k]] for k in part.empty_clients}
        assert expected <= named
        break
    assert named, "no seed left a client empty"
