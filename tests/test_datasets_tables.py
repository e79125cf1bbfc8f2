"""load_table: one's own .csv, .parquet, .npz files and DataFrames."""

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from skslot.datasets import FeatureTable, dirichlet_partition, load_dataset, load_table


def hospital_frame(n=60, seed=0):
    """Features f0..f11 of awkward magnitudes, string labels and clients, a split column."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 12)) * 10.0 ** rng.integers(-300, 300, size=(1, 12))
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(12)])
    frame["diagnosis"] = rng.choice(["healthy", "flu", "covid"], size=n)
    frame["site"] = rng.choice(["north", "south", "east"], size=n)
    frame["part"] = np.where(np.arange(n) % 4 == 0, "test", "train")
    return frame


def assert_reads_back(table, frame):
    X = frame[[f"f{j}" for j in range(12)]].to_numpy()
    np.testing.assert_array_equal(table.X, X)  # exactly, bit for bit
    assert table.X.dtype == np.float64
    assert table.classes.tolist() == ["covid", "flu", "healthy"]
    assert table.clients.tolist() == ["east", "north", "south"]
    np.testing.assert_array_equal(table.classes[table.y], frame["diagnosis"])
    np.testing.assert_array_equal(table.clients[table.client], frame["site"])
    np.testing.assert_array_equal(table.is_test, frame["part"] == "test")
    assert table.y.dtype == table.client.dtype == np.int64
    assert table.feature_names.tolist() == [f"f{j}" for j in range(12)]


@pytest.mark.parametrize("name", ["hospital.csv", "hospital.csv.gz"])
def test_csv_round_trip_is_exact(tmp_path, name):
    frame = hospital_frame()
    path = tmp_path / name
    frame.to_csv(path, index=False)
    table = load_table(path, label="diagnosis", client="site", features="f", split="part")
    assert isinstance(table, FeatureTable) and table.name == "hospital"
    assert_reads_back(table, frame)


def test_parquet_round_trip_is_exact(tmp_path):
    pytest.importorskip(
        "pyarrow", reason="pyarrow is not installed (pip install 'skslot[parquet]')"
    )
    frame = hospital_frame()
    path = tmp_path / "hospital.parquet"
    frame.to_parquet(path, index=False)
    table = load_table(str(path), label="diagnosis", client="site", split="part")
    assert_reads_back(table, frame)  # features=None: every numeric column


def test_dataframe_with_string_labels_and_clients_and_the_feature_choices():
    frame = hospital_frame()
    shuffled = frame[["part", "f10", "site", "f2", "f0", "diagnosis", "f1"]].copy()
    shuffled["note"] = "free text"  # not numeric: not a feature when features=None
    shuffled["flag"] = True  # boolean: only as a named feature
    by_prefix = load_table(shuffled, label="diagnosis", client="site", features="f")
    assert by_prefix.feature_names.tolist() == ["f0", "f1", "f2", "f10"]  # numeric order
    np.testing.assert_array_equal(by_prefix.X, frame[["f0", "f1", "f2", "f10"]].to_numpy())
    assert by_prefix.is_test is None and by_prefix.name == "table"
    every = load_table(shuffled, label="diagnosis", client="site", split="part", name="h")
    assert every.feature_names.tolist() == ["f10", "f2", "f0", "f1"]  # table order
    assert every.name == "h"
    listed = load_table(shuffled, label="diagnosis", client="site", features=["flag", "f2"])
    np.testing.assert_array_equal(listed.X, np.c_[np.ones(60), frame["f2"]])


def test_numeric_labels_and_clients_keep_their_values():
    frame = pd.DataFrame({"x": [0.1, 0.2, 0.3, 0.4], "y": [7, 3, 7, 9], "c": [20, 10, 10, 20]})
    table = load_table(frame, label="y", client="c")
    assert table.classes.tolist() == [3, 7, 9] and table.y.tolist() == [1, 0, 1, 2]
    assert table.clients.tolist() == [10, 20] and table.client.tolist() == [1, 0, 0, 1]
    data = table.to_domain_dataset()
    assert data.classes.tolist() == ["3", "7", "9"] and data.domains.tolist() == ["10", "20"]
    np.testing.assert_array_equal(data.domain, table.client)


@pytest.mark.parametrize(
    "values",
    [
        ["Train", " test", "TRAIN", "train", "Test", "train"],
        [False, True, False, False, True, False],
        [0, 1, 0, 0, 1, 0],
        [0.0, 1.0, 0.0, 0.0, 1.0, 0.0],
        np.array([False, True, False, False, True, False], dtype=object),
    ],
)
def test_split_column_means_is_test(values):
    frame = pd.DataFrame({"x": np.arange(6.0), "y": [0, 1] * 3, "c": [0] * 6, "s": values})
    table = load_table(frame, label="y", client="c", split="s")
    assert table.is_test.tolist() == [False, True, False, False, True, False]
    assert table.feature_names.tolist() == ["x"]  # the split column is not a feature


def test_the_caller_dataframe_is_never_changed():
    frame = hospital_frame()
    frame["flag"] = pd.array([1, 0] * 30, dtype="Int64")
    before = frame.copy(deep=True)
    dtypes = frame.dtypes.copy()
    table = load_table(frame, label="diagnosis", client="site", split="part")
    pd.testing.assert_frame_equal(frame, before)
    pd.testing.assert_series_equal(frame.dtypes, dtypes)
    table.X[:] = 0.0  # the table's arrays are copies, not views of the frame
    table.is_test[:] = True
    pd.testing.assert_frame_equal(frame, before)


def test_npz_in_the_existing_format(tmp_path):
    path = tmp_path / "mine.npz"
    X = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.savez(
        path,
        X=X,
        y=np.array([0, 1, 0, 1, 0, 1]),
        domain=np.array([0, 0, 0, 1, 1, 1]),
        domains=np.array(["a", "b"]),
        held_out=np.array([0, 0, 1, 0, 0, 1]),
    )
    table = load_table(path, split="held_out")
    np.testing.assert_array_equal(table.X, X) and table.X.dtype == np.float64
    assert table.clients.tolist() == ["a", "b"] and table.classes.tolist() == ["0", "1"]
    assert table.is_test.tolist() == [False, False, True, False, False, True]
    assert table.feature_names.tolist() == ["x0", "x1"] and table.name == "mine"
    assert load_table(path, label="y", client="domain").is_test is None


def test_a_table_file_through_load_dataset_and_the_paper_partition(tmp_path):
    frame = hospital_frame(n=300)
    path = tmp_path / "hospital.csv"
    frame.to_csv(path, index=False)
    data = load_dataset(path, label="diagnosis", client="site", features="f")
    assert data.domains.tolist() == ["east", "north", "south"] and data.X.shape == (300, 12)
    part = dirichlet_partition(data.y, data.domain, alpha=None, random_state=0)
    assert part.n_clients == 3


def small_frame(**columns):
    frame = pd.DataFrame({"f0": [0.5, 1.5, 2.5], "f1": [1, 2, 3], "y": ["a", "b", "a"]})
    frame["c"] = ["k", "k", "m"]
    for key, value in columns.items():
        frame[key] = value
    return frame


def _csv(tmp_path, text, name="bad.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _npz(tmp_path, **arrays):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


OK = {"label": "y", "client": "c"}
NPZ = {"X": np.ones((3, 2)), "y": np.array([0, 1, 0]), "domain": np.array([0, 0, 1])}

# (source builder, keyword arguments, the ValueError's message after "<file>: ")
ERRORS = {
    "no label=": (
        lambda p: small_frame(),
        {"client": "c"},
        "label= must name the label column",
    ),
    "missing label column": (
        lambda p: small_frame(),
        {"label": "Y", "client": "c"},
        "no label column 'Y' (columns: 'f0', 'f1', 'y', 'c')",
    ),
    "missing split column": (
        lambda p: small_frame(),
        {**OK, "split": "s"},
        "no split column 's' (columns: 'f0', 'f1', 'y', 'c')",
    ),
    "same column twice": (
        lambda p: small_frame(),
        {"label": "y", "client": "y"},
        "label=, client= and split= must name different columns",
    ),
    "missing feature": (
        lambda p: small_frame(),
        {**OK, "features": ["f0", "f9"]},
        "no feature column(s) 'f9'",
    ),
    "no prefix match": (
        lambda p: small_frame(),
        {**OK, "features": "g"},
        "no feature columns g0, g1, ... (columns: 'f0', 'f1', 'y', 'c')",
    ),
    "label as feature": (
        lambda p: small_frame(),
        {**OK, "features": ["f0", "y"]},
        "feature column 'y' is also the label column",
    ),
    "non-numeric feature": (
        lambda p: small_frame(f1=["1", "2", "x"]),
        {**OK, "features": "f"},
        "feature column 'f1' is not numeric (dtype str, row 2 holds 'x')",
    ),
    "no numeric feature": (
        lambda p: small_frame()[["y", "c"]],
        OK,
        "no numeric feature columns besides the label, client and split "
        "columns; name them with features=",
    ),
    "NaN feature": (
        lambda p: small_frame(f1=[1.0, np.nan, 3.0]),
        OK,
        "feature column 'f1' has missing or infinite values (first in row 1, counting rows from 0)",
    ),
    "infinite feature": (
        lambda p: small_frame(f0=[0.0, 1.0, np.inf]),
        OK,
        "feature column 'f0' has missing or infinite values (first in row 2, counting rows from 0)",
    ),
    "missing label": (
        lambda p: small_frame(y=["a", None, "b"]),
        OK,
        "label column 'y' has missing values (first in row 1, counting rows from 0)",
    ),
    "mixed clients": (
        lambda p: small_frame(c=np.array([1, "k", 2], dtype=object)),
        OK,
        "client column 'c' mixes values of types int, str",
    ),
    "bad split": (
        lambda p: small_frame(s=["train", "val", "test"]),
        {**OK, "split": "s"},
        "split column 's' must hold 'train'/'test', booleans or 0/1 (True or 1: test), got 'val'",
    ),
    "split 2": (
        lambda p: small_frame(s=[0, 1, 2]),
        {**OK, "split": "s"},
        "split column 's' must hold 'train'/'test', booleans or 0/1 (True or 1: test), got 2",
    ),
    "no rows": (lambda p: small_frame().iloc[:0], OK, "no rows"),
    "duplicate columns": (
        lambda p: pd.concat([small_frame(), small_frame()["f0"]], axis=1),
        OK,
        "duplicate column name(s) 'f0'",
    ),
    "csv no rows": (lambda p: _csv(p, "f0,y,c\n"), OK, "no rows"),
    "csv empty": (lambda p: _csv(p, ""), OK, "empty file (no header, no rows)"),
    # the reader's own reason, in brackets, varies with its version: ... stands for it
    "csv ragged": (
        lambda p: _csv(p, "f0,y,c\n1,a,k\n1,a,k,extra,more\n"),
        OK,
        "not a readable CSV file (...)",
    ),
    "parquet garbage": (
        lambda p: _csv(p, "not parquet", "bad.parquet"),
        OK,
        "not a readable Parquet file (...)",
    ),
    "unknown extension": (
        lambda p: _csv(p, "f0,y,c\n", "bad.xlsx"),
        OK,
        "unknown extension; expected one of .npz, .csv, .parquet",
    ),
    "npz object array": (
        lambda p: _npz(p, **NPZ, classes=np.array([{}], dtype=object)),
        {},
        "array 'classes' holds Python objects (dtype object), "
        "which are never unpickled; store numbers or fixed-width strings",
    ),
    "npz column names": (
        lambda p: _npz(p, **NPZ),
        OK,
        "an .npz holds arrays X, y and domain; label=, client= and features= "
        "name the columns of a table",
    ),
    "npz no split": (
        lambda p: _npz(p, **NPZ),
        {"split": "s"},
        "no split array 's' (arrays: ['X', 'y', 'domain'])",
    ),
    "npz split NaN": (
        lambda p: _npz(p, **NPZ, s=np.array([0.0, np.nan, 1.0])),
        {"split": "s"},
        "split column 's' has missing values (first in row 1, counting rows from 0)",
    ),
    "npz missing key": (
        lambda p: _npz(p, X=NPZ["X"], y=NPZ["y"]),
        {},
        "missing key(s) ['domain']; expected X, y and domain",
    ),
    "npz not a zip": (
        lambda p: _csv(p, "f0,y,c\n", "bad.npz"),
        {},
        "not a NumPy .npz archive (pickled data)",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_bad_tables_fail_in_one_line_naming_the_source(tmp_path, case):
    build, kwargs, message = ERRORS[case]
    if "parquet" in case:
        pytest.importorskip("pyarrow", reason="pyarrow is not installed")
    source = build(tmp_path)
    where = "DataFrame" if isinstance(source, pd.DataFrame) else str(source)
    with pytest.raises(ValueError) as error:
        load_table(source, **kwargs)
    text = str(error.value)
    expected = f"{where}: {message}"
    if expected.endswith("(...)"):
        assert text.startswith(expected[:-4]) and text.endswith(")"), text
    else:
        assert text == expected
    assert "\n" not in text and "allow_pickle" not in text


def test_wrong_argument_types_and_an_absent_file(tmp_path):
    path = tmp_path / "absent.csv"
    with pytest.raises(FileNotFoundError) as error:
        load_table(path, **OK)
    assert str(error.value) == f"{path}: no such file"
    with pytest.raises(TypeError, match="source must be a file path or a pandas DataFrame, got"):
        load_table(np.zeros((3, 2)), **OK)
    with pytest.raises(TypeError, match="features must be a list of column names, a prefix"):
        load_table(small_frame(), **OK, features=3)


@pytest.mark.parametrize(
    ("module", "name", "extra"),
    [
        ("pandas", "a.csv", "tables"),
        ("pandas", "a.parquet", "parquet"),
        ("pyarrow", "a.parquet", "parquet"),
    ],
)
def test_a_missing_reader_names_the_extra(tmp_path, monkeypatch, module, name, extra):
    path = tmp_path / name
    path.write_text("f0,y,c\n1,a,k\n")
    monkeypatch.setitem(sys.modules, module, None)  # import fails as when not installed
    with pytest.raises(ImportError) as error:
        load_table(path, **OK)
    assert str(error.value) == f"reading {path} needs {module}: pip install 'skslot[{extra}]'"


def test_error_messages_name_the_file_even_with_odd_characters(tmp_path):
    path = tmp_path / "my data (v2).csv"
    path.write_text("f0,y,c\n1,a,k\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: no label column 'label'")):
        load_table(path, label="label", client="c")


def test_the_data_page_examples_run(tmp_path, monkeypatch):
    page = Path(__file__).resolve().parents[1] / "docs" / "data.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)  # the example writes patients.csv
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, str(page), "exec"), namespace)
    assert namespace["predicted"].shape == (2,)  # the table's two test rows
    assert namespace["table"].classes.tolist() == ["covid", "flu"]
    assert namespace["digits"].X.shape[1] == 256
