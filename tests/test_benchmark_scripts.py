"""The benchmark scripts run (tiny sizes): they are not timed here, only kept working."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_gpu_bench_runs_on_cpu_tensors():
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch")
    result = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "gpu_bench.py"),
            "--device",
            "cpu",
            "--dims",
            "32",
            "--clients",
            "2",
            "--rows",
            "64",
            "--transform-rows",
            "500",
            "--budget",
            "30",
            "--low-rank-rows",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for title in ("## Barycenter", "## Summaries", "## Transform", "## Low-rank path"):
        assert title in result.stdout
    assert "| 32 | 2 | float32 |" in result.stdout
    assert "| 32 | 2 | 14 |" in result.stdout  # two clients of 8 rows: d = 2 x 7


def test_barycenter_benchmark_runs_and_reaches_the_accuracy_it_prints():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_barycenter.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    tables = result.stdout.split("\n## ")[1:]
    assert len(tables) == 7  # six sets at one thread, the first at two
    assert sum("2 BLAS threads" in table for table in tables) == 1
    prototype = "prototype column skipped" not in result.stdout
    pot = "POT column skipped" not in result.stdout
    for table in tables:
        rows = {row.split(" | ")[0][2:]: row.split(" | ") for row in table.splitlines()[3:]}
        methods = ["float64", "mixed"] + ["prototype"] * prototype + ["POT"] * pot
        assert sorted(rows) == sorted(methods)
        for name in ("float64", "mixed"):  # both stop at the tolerance, 1e-10
            assert float(rows[name][-3]) <= 2e-10
            if pot:  # and agree with POT's barycenter to POT's own accuracy
                assert float(rows[name][-2]) <= 1e-6
        assert "eigh64" in rows["mixed"][-1]  # the mixed path ran, and says how


def test_many_clients_benchmark_runs_and_its_modes_agree():
    result = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "many_clients.py"),
            *("--sizes", "12:40", "--warm-start", "12:40", "--ray", "none"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split(" | ") for line in result.stdout.splitlines() if line.startswith("| 12 |")]
    modes = {(row[1], row[3]): row[4] for row in rows if "n_jobs=" in row[3]}
    # streamed and held: the same iterations (the same arithmetic, in blocks)
    assert modes[("40", "streamed, n_jobs=2")] == modes[("40", "held, n_jobs=1")]
    assert "speed-up" in result.stdout and "x |" in result.stdout
    distance = float(result.stdout.split("relative distance to the fixed point's answer ")[1][:7])
    assert distance < 1e-8


def test_low_rank_benchmark_runs_and_its_two_paths_agree():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "low_rank.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| 300 |")]
    assert len(rows) == 2
    barycenter, maps = (float(v) for v in rows[0].split("|")[-2].split(","))
    assert barycenter <= 1e-8 and maps <= 1e-8  # the converged case: equal paths
    assert "dense not converged" in rows[1]  # the one-iteration case says so


def test_low_rank_streaming_benchmark_runs_and_its_two_runs_agree():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "low_rank.py"), "--quick", "--streaming"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith(("| None |", "| 1 |"))]
    assert len(rows) == 2
    difference = re.search(r"maps on 5 rows: ([0-9.e+-]+)\. ", result.stdout)
    assert difference is not None and float(difference.group(1)) <= 1e-10


def test_private_federation_benchmark_runs_and_prints_each_configuration():
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "private_federation.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,  # 193 s measured on 2 cores shared with two benchmark runs
    )
    assert result.returncode == 0, result.stderr
    rows = (
        f"| {case} | {config} | 9 : 1 |"
        for case in ("own mix", "domain")
        for config in ("no SLOT", "centred by the release", "SLOT")
    )
    for row in rows:
        assert result.stdout.count(row) == 2  # with and without label skew
    assert "## FedCGS: releasing in a lower dimension" in result.stdout


def test_label_mix_study_scores_every_configuration_both_ways():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "label_mix.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for title in ("## own mix", "## domain", "## domain, heads on each client's mix"):
        assert f"\n{title}\n" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("| digits")]
    assert len(rows) == 3 * 8  # three tables, eight heads (one data set, alpha 0.1)
    for row in rows:
        cells = [float(c) for c in row.strip("| ").split(" | ")[3:9]]
        assert all(0.0 <= c <= 100.0 for c in cells)


def test_private_mechanisms_study_without_noise_is_fedcgs_on_exact_statistics(monkeypatch):
    """With no budget, the one release (and the noise-level ridge, which only noise sets)
    is FedCGS on the clients' exact statistics; every mechanism runs under a budget."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    import numpy as np

    from skslot.datasets import dirichlet_partition, load_digits_effnet
    from skslot.heads import ClassStatistics, FedCGSClassifier

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import private_mechanisms as study

    data = load_digits_effnet()
    part = dirichlet_partition(data.y, data.domain, alpha=0.1, random_state=0)
    X, classes = study.l2(data.X), np.unique(data.y)
    stats, tests = [], {}
    for k in range(part.n_clients):
        rows = part.train_index[part.train_client == k]
        stats.append(ClassStatistics.from_rows(X[rows], data.y[rows], classes))
        test = part.test_index[part.test_client == k]
        tests[k] = (X[test], data.y[test])
    head = FedCGSClassifier(label_mix="federation", shrinkage=1e-3).fit_from_statistics(
        stats, classes
    )
    exact = study.scored(head, tests, study.training_counts(data, part), classes)
    for mechanism in ("one release", "noise-level ridge"):
        found = study.one_run(data, part, mechanism, None, False, 0)
        assert found == pytest.approx(exact, abs=1e-9)
    for mechanism in study.MECHANISMS:
        found = study.one_run(data, part, mechanism, 8.0, True, 0)
        assert set(found) == {"domain", "own mix"}
        assert all(20.0 < value < 100.0 for value in found.values())


def test_screening_study_runs_a_part_and_reports_from_its_records(monkeypatch, tmp_path, capsys):
    """One part (a case and a seed) of the defence's honest-runs study, recorded, then the
    report from the records: both ways of the defence in each configuration."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import screening as study

    monkeypatch.setattr(study, "OUT", tmp_path / "screening.csv")
    monkeypatch.setattr(study, "FEDERATIONS", (("digits", 2),))
    monkeypatch.setattr(study, "ALPHAS", (None,))
    monkeypatch.setattr(study, "HEADS", ("FedCGS",))
    monkeypatch.setattr(study, "N_JOBS", 1)  # in this process: its workers import no script
    study.run_part("own mix", 0)
    records = study.read_records()
    assert {(r["config"], r["way"]) for r in records} == {
        (c, w) for c in ("defaults", "auto") for w in ("none", "default")
    }
    assert all(r["clients"] == 6 and r["screened"] == (r["way"] == "default") for r in records)
    assert all(0.0 <= r["macro_accuracy"] <= 100.0 for r in records)
    capsys.readouterr()
    study.main()
    out = capsys.readouterr().out
    from skslot_bench import CASE_TITLES

    assert f"## {CASE_TITLES['own mix']}" in out and CASE_TITLES["domain"] not in out
    rows = [line for line in out.splitlines() if line.startswith("| digits (6) | none | FedCGS")]
    assert len(rows) == 2  # the defaults and tau = "auto"
    with pytest.raises(SystemExit, match="case must be one of"):
        study.run_part("every class", 0)
    with pytest.raises(SystemExit, match="heads must be some of"):
        study.run_part("own mix", 0, ("LDA",))


def test_flip_harm_study_splits_the_harm_by_class_and_shows_the_screening_case(monkeypatch):
    """One seed of one head: the accuracy change on the classes each honest client holds and
    on the others (each a mean over classes: the macro over every class lies between them),
    the screening's case on the attacker as the run decided it, and the rule on test rows."""
    from .conftest import shared_npz

    shared_npz("digits_effnet_lite0.npz")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import flip_harm
    import numpy as np

    attacked, case = flip_harm.one_run("FedCGS", 0, "flipped", screen="on")
    alone, none = flip_harm.one_run("FedCGS", 0, "absent")
    assert none is None  # without the attacker: nothing screened on it
    assert set(attacked) == set(alone) == set(flip_harm.attacks.HONEST)
    for held, other, macro in flip_harm.harm(attacked, alone, flip_harm.CLASSES):
        assert min(held, other) <= macro <= max(held, other)
    assert case["voters"] == 3 and case["rows"] > 0
    assert case["better"] + case["worse"] <= case["rows"]
    if case["excluded"]:  # the case holds only at the level and the gain asked for
        assert case["p_value"] < case["threshold"] and case["gain"] >= 0.02
    rng = np.random.default_rng(0)
    # the same heads' rows: no discordant row, no case at any budget
    assert flip_harm.trusted_cases(alone, alone, None, rng) == 0.0
    assert flip_harm.trusted_cases(alone, alone, 50, rng) == 0.0
    # every row right without it and wrong with it: the case holds in every draw
    wrong = {n: (y_test, ~right, y) for n, (y_test, right, y) in alone.items()}
    everything = {n: (y_test, np.ones_like(right), y) for n, (y_test, right, y) in alone.items()}
    nothing = {n: (y_test, np.zeros_like(right), y) for n, (y_test, right, y) in alone.items()}
    assert flip_harm.trusted_cases(nothing, everything, 50, rng) == 1.0
    assert 0.0 <= flip_harm.trusted_cases(wrong, alone, 100, rng) <= 1.0


def test_screening_rules_study_records_the_first_round_counts(monkeypatch):
    """The rule study's first screening round: every client's counts from each of the three
    others, each consistent (discordant rows within the rows scored)."""
    from .conftest import shared_npz

    shared_npz("digits_effnet_lite0.npz")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import screening_rules as study

    votes = study.first_round_votes("none (genuine rows)", "FedCGS", 0)
    nodes = {*study.attacks.HONEST, study.attacks.ATTACKER}
    assert set(votes) == nodes
    for target, found in votes.items():
        assert set(found) == nodes - {target}
        assert all(0 <= b + w <= n and n > 0 for b, w, n in found.values())


def test_weight_caps_study_caps_the_attacker_and_reports_against_the_baselines(monkeypatch):
    """At a cap of twice the median count, a fourth client declaring nine times its rows is
    capped (or rejected), never accepted with its full weight; a cell reads the gap to the
    lower baseline of the same cap."""
    from .conftest import shared_npz

    shared_npz("digits_effnet_lite0.npz")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import weight_caps as study

    genuine, absent, _, flips = study.chosen()[:4]
    record = study.one_run(flips, "FedCGS", "domain", 0, 2.0)
    assert record["cap"] == 2.0 and record["fate"] in {"capped", "rejected at screening"}
    records = [
        {**record, "attack": a.name, "macro": macro, "fate": "accepted", "honest_out": 0}
        for a, macro in ((genuine, 0.6), (absent, 0.5), (flips, 0.4))
    ]
    assert study.cell(records, flips.name, "FedCGS", "domain", 2.0) == "40.0 (**-10.0**)"
    assert study.cell(records, genuine.name, "FedCGS", "domain", 2.0) == "60.0"


def test_code_lines_counts_code_alone(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text(
        '"""Module docstring,\n\nover three lines."""\n\n# a comment\nx = (\n    1,\n)\n'
    )
    (package / "sub" / "b.py").write_text(
        'def f():\n    """One line."""\n    return """a string\nthat is code"""  # trailing\n'
    )
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "code_lines.py"), str(package)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "| a | 3 |" in result.stdout and "| sub | 3 |" in result.stdout
    assert result.stdout.rstrip().endswith("total: 6")


def test_fedcgs_covariance_study_picks_by_its_rule_against_the_reference(
    monkeypatch, tmp_path, capsys
):
    """One seed of the embedded digits: every setting against the fixed 1e-3 reference, the
    OAS ridges (FedCGS's default) among them, and the pick with the rule's two tests."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import fedcgs_covariance

    monkeypatch.setattr(fedcgs_covariance, "CACHE", tmp_path / "runs")
    fedcgs_covariance.main(["--smoke"])
    out = capsys.readouterr().out
    assert "# FedCGS: covariance and ridge against the reference (total, 1e-3)" in out
    assert re.search(r"\*\*The rule's pick: (total|within) (OAS|[0-9.e-]+)\*\*", out)
    assert "(a) every cell >= the reference - 0.5" in out
    assert "| total OAS |" in out and "| within OAS |" in out
    assert "the 1280-d digits are not in this study" in out  # named, not silently left out


def test_readme_times_runs_the_readme_commands_and_compares_their_digits(monkeypatch, capsys):
    """--quick: the README's example prints the README's lines; a one-seed bench prints the
    same tables with one run at a time as with two (not the README's: another grid)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import readme_times

    readme_times.main(["--quick"])
    out = capsys.readouterr().out
    assert "| the README's example |" in out and out.split("| the README's example |")[1].split(
        "\n"
    )[0].endswith("| yes |")
    assert "| skslot bench --n-jobs 1 |" in out
    assert "The two benchmark runs print the same tables: yes." in out
