"""One loader for one's own data: an ``.npz``, a ``.csv`` or ``.parquet`` file, a DataFrame."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..exceptions import shown_labels
from ._loaders import DomainDataset, first_line, load_npz, open_npz, read_array

TABLE_EXTENSIONS = (".npz", ".csv", ".parquet")
_COMPRESSED_CSV = (".gz", ".bz2", ".xz", ".zip", ".zst")
_SPLIT_WORDS = {"train": False, "test": True}
#: The column a table's own train/test split is read from where none is named.
DEFAULT_SPLIT_COLUMN = "split"


@dataclass(frozen=True, eq=False)
class FeatureTable:
    """Feature rows with labels, the client of each row, and an optional test mask.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features), float64
        A copy: never a view of the caller's data.
    y : ndarray of shape (n_samples,), int64
        Label code, indexing ``classes``: ``classes[y]`` gives the labels.
    client : ndarray of shape (n_samples,), int64
        Client code, indexing ``clients``: ``clients[client]`` gives the clients.
    classes : ndarray
        The distinct label values, sorted (strings stay strings, numbers numbers).
    clients : ndarray
        The distinct client values, sorted.
    feature_names : ndarray of str
        The feature columns, in the order of ``X``'s columns (``x0``, ``x1``,
        ... for an ``.npz``).
    is_test : ndarray of bool of shape (n_samples,) or None
        Which rows are test rows, from the ``split`` column; ``None`` without one.
    name : str
    """

    X: np.ndarray
    y: np.ndarray
    client: np.ndarray
    classes: np.ndarray
    clients: np.ndarray
    feature_names: np.ndarray
    is_test: np.ndarray | None
    name: str

    def to_domain_dataset(self) -> DomainDataset:
        """The same rows as a :class:`DomainDataset`, one domain per client.

        Class and client names become strings; ``is_test`` is not carried
        (the paper's protocol, :func:`dirichlet_partition`, splits by itself).

        Returns
        -------
        DomainDataset
        """
        clients, classes = self.clients.astype(str), self.classes.astype(str)
        return DomainDataset(self.X, self.y, self.client, clients, classes, self.name)


def table_kind(source: str | os.PathLike) -> str | None:
    """``"npz"``, ``"csv"`` (also compressed) or ``"parquet"`` by extension, else None."""
    suffixes = [s.lower() for s in os.path.basename(os.fspath(source)).split(".")[1:]]
    if suffixes and suffixes[-1] in ("npz", "csv", "parquet"):
        return suffixes[-1]
    if len(suffixes) > 1 and suffixes[-2] == "csv" and f".{suffixes[-1]}" in _COMPRESSED_CSV:
        return "csv"
    return None


def table_columns(source: str | os.PathLike) -> list[str]:
    """The column names of a ``.csv`` or ``.parquet`` file (the arrays of an ``.npz``), read
    from its header alone.

    Parameters
    ----------
    source : str or path-like

    Returns
    -------
    list of str
        Empty for a file it cannot read (:func:`load_table` then says why).

    Examples
    --------
    >>> import os, tempfile
    >>> from skslot.datasets._tables import table_columns
    >>> path = os.path.join(tempfile.mkdtemp(), "shop.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("f0,f1,label,split" + chr(10) + "0.5,1.0,a,train" + chr(10))
    >>> table_columns(path)
    ['f0', 'f1', 'label', 'split']
    """
    path = os.fspath(source)
    kind = table_kind(path)
    try:
        if kind == "npz":
            with open_npz(path) as archive:
                return list(archive.files)
        if kind == "csv":
            return [str(c) for c in _import("pandas", path, "tables").read_csv(path, nrows=0)]
        if kind == "parquet":
            pyarrow_parquet = __import__("pyarrow.parquet", fromlist=["read_schema"])
            return [str(c) for c in pyarrow_parquet.read_schema(path).names]
    except (OSError, ValueError, ImportError):
        return []
    return []


def _import(module: str, path: str, extra: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"reading {path} needs {module}: pip install 'skslot[{extra}]'") from None


def _read_frame(path: str, kind: str) -> Any:
    """The rows of a ``.csv`` or ``.parquet`` file, read whole, as a DataFrame."""
    pd = _import("pandas", path, "tables" if kind == "csv" else "parquet")
    try:
        if kind == "parquet":
            _import("pyarrow", path, "parquet")
            return pd.read_parquet(path, engine="pyarrow")
        # every float written with repr (pandas' to_csv does) must read back exactly: the
        # round-trip converter, pandas' only one from 3.1 (where the option is deprecated)
        version = re.match(r"(\d+)\.(\d+)", pd.__version__)
        exact = version and (int(version[1]), int(version[2])) >= (3, 1)
        options = {} if exact else {"float_precision": "round_trip"}
        # read whole, so a column's type is the whole column's (no chunked guesses)
        return pd.read_csv(path, low_memory=False, **options)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: empty file (no header, no rows)") from None
    except (ValueError, OSError) as exc:  # a parser's, a decoder's or Arrow's error
        what = "CSV" if kind == "csv" else "Parquet"
        raise ValueError(f"{path}: not a readable {what} file ({first_line(exc)})") from None


def load_table(
    source: Any,
    *,
    label: Any = None,
    client: Any = None,
    features: str | list | None = None,
    split: Any = None,
    name: str | None = None,
    finite: bool = True,
) -> FeatureTable:
    """Read one's own feature table: an ``.npz``, ``.csv`` or ``.parquet`` file, or a DataFrame.

    Parameters
    ----------
    source : str, path-like or pandas.DataFrame
        A file, by its extension: ``.csv`` (also ``.csv.gz`` and other
        compressions pandas reads; needs pandas, ``pip install
        'skslot[tables]'``), ``.parquet`` (needs pandas and pyarrow, ``pip
        install 'skslot[parquet]'``) or ``.npz`` (arrays ``X``, ``y``,
        ``domain``, the format of :func:`load_npz`; the domains are the
        clients).  A DataFrame is read, never modified.
    label, client : column name
        The label column (required for a table) and the client column (for a
        table of one client's rows, such as a Flower node's own file, leave
        ``client`` out: every row is then one client named ``name``).  For an
        ``.npz`` leave them out, or name its arrays ``"y"`` and ``"domain"``.
        Values may be numbers or strings: they are encoded to codes ``0, 1,
        ...`` in sorted order, the values kept in ``classes`` / ``clients``.
    features : list of column names, str or None, default=None
        The feature columns: a list (in that order); a prefix string, ``"f"``
        selecting the columns ``f0, f1, ...`` (the prefix followed by digits)
        in numeric order; or ``None``, every numeric column (booleans
        excluded) other than the label, client and split columns, in table
        order, and every text column most of whose cells are numbers (one
        cell that is not is refused, naming its column and row).  Features
        must be numeric or boolean, with no missing or infinite values.
    split : column name, optional
        A column saying which rows are test rows: the strings ``"train"`` /
        ``"test"`` (any case, surrounding spaces ignored), or booleans or
        ``0`` / ``1``, where ``True`` / ``1`` means *test* (an ``is_test``
        column).  For an ``.npz``, the name of a 1-D array of such values.
    name : str, optional
        Default: the file name without extensions, or ``"table"``.
    finite : bool, default=True
        Refuse a missing or infinite feature value (naming its column and
        row); ``False`` keeps it (NaN or infinite) for the caller, as a
        private client does (its null rows), which no error may name.

    Returns
    -------
    FeatureTable

    Raises
    ------
    ValueError
        For a file or table it cannot use, in one line naming the file (or
        ``DataFrame``) and the problem: unknown extension, unreadable or
        empty file, no rows, a missing column, a non-numeric feature column,
        missing or non-finite values, a split value other than the above,
        an ``.npz`` with object arrays.
    FileNotFoundError
        If there is no such file.
    ImportError
        If reading the file needs pandas or pyarrow and it is not installed;
        the message names the extra to install.

    Examples
    --------
    >>> import pandas as pd
    >>> from skslot.datasets import load_table
    >>> frame = pd.DataFrame({
    ...     "f0": [0.5, 1.5, 2.5, 3.5], "f1": [1.0, 0.0, 1.0, 0.0],
    ...     "digit": ["seven", "one", "seven", "one"],
    ...     "hospital": ["north", "north", "south", "south"],
    ...     "part": ["train", "test", "Train", "TEST"],
    ... })
    >>> table = load_table(frame, label="digit", client="hospital", features="f", split="part")
    >>> table.X.shape, table.classes.tolist(), table.y.tolist()
    ((4, 2), ['one', 'seven'], [1, 0, 1, 0])
    >>> table.clients[table.client].tolist(), table.is_test.tolist()
    (['north', 'north', 'south', 'south'], [False, True, False, True])
    """
    pd = sys.modules.get("pandas")  # an object cannot be a DataFrame if pandas is not loaded
    if pd is not None and isinstance(source, pd.DataFrame):
        return _from_frame(
            source, "DataFrame", label, client, features, split, name or "table", finite
        )
    try:
        path = os.fspath(source)
    except TypeError:
        raise TypeError(
            f"source must be a file path or a pandas DataFrame, got {type(source).__name__}"
        ) from None
    kind = table_kind(path)
    if kind is None:
        raise ValueError(
            f"{path}: unknown extension; expected one of {', '.join(TABLE_EXTENSIONS)}"
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    if kind == "npz":
        return _from_npz(path, label, client, features, split, name, finite)
    frame = _read_frame(path, kind)
    base = os.path.basename(path)
    name = name or base.split(".")[0] or base  # the file name without extensions
    return _from_frame(frame, path, label, client, features, split, name, finite)


def _from_npz(path, label, client, features, split, name, finite) -> FeatureTable:
    if label not in (None, "y") or client not in (None, "domain") or features not in (None, "X"):
        raise ValueError(
            f"{path}: an .npz holds arrays X, y and domain; label=, client= and features= "
            "name the columns of a table"
        )
    data = load_npz(path, name=name, finite=finite)
    is_test = None
    if split is not None:
        with open_npz(path) as archive:
            if split not in archive.files:
                raise ValueError(f"{path}: no split array {split!r} (arrays: {archive.files})")
            values = read_array(archive, split, path)
        if values.shape != data.y.shape:
            raise ValueError(f"{path}: split array {split!r} must be 1-D with one value per row")
        missing = np.isnan(values) if np.issubdtype(values.dtype, np.floating) else None
        is_test = _test_mask(values, missing, path, split)
    return FeatureTable(
        data.X.astype(np.float64),
        data.y.astype(np.int64),
        data.domain.astype(np.int64),
        data.classes,
        data.domains,
        np.array([f"x{j}" for j in range(data.X.shape[1])]),
        is_test,
        data.name,
    )


def _from_frame(frame, where, label, client, features, split, name, finite) -> FeatureTable:
    if label is None:
        raise ValueError(f"{where}: label= must name the label column")
    columns = list(frame.columns)
    duplicated = list(dict.fromkeys(frame.columns[frame.columns.duplicated()]))
    if duplicated:
        raise ValueError(f"{where}: duplicate column name(s) {shown_labels(duplicated, 8)}")
    roles = {"label": label, "client": client, "split": split}
    roles = {role: column for role, column in roles.items() if column is not None}
    for role, column in roles.items():
        if column not in columns:
            raise ValueError(
                f"{where}: no {role} column {column!r} (columns: {shown_labels(columns, 8)})"
            )
    if len(set(roles.values())) < len(roles):
        raise ValueError(f"{where}: label=, client= and split= must name different columns")
    if len(frame) == 0:
        raise ValueError(f"{where}: no rows")
    names = _feature_columns(frame, where, features, roles)
    X = _feature_matrix(frame, where, names, finite)
    y, classes = _codes(frame[label], where, "label", label)
    if client is None:  # one client's own table
        codes, clients = np.zeros(len(frame), dtype=np.int64), np.array([name])
    else:
        codes, clients = _codes(frame[client], where, "client", client)
    is_test = None
    if split is not None:
        column = frame[split]
        is_test = _test_mask(column.to_numpy(), column.isna().to_numpy(), where, split)
    feature_names = np.array([str(c) for c in names])
    return FeatureTable(X, y, codes, classes, clients, feature_names, is_test, name)


def _feature_columns(frame, where, features, roles: dict) -> list:
    reserved = {column: role for role, column in roles.items()}
    if features is None:
        names = [c for c in frame.columns if c not in reserved and _numeric_looking(frame[c])]
        if not names:
            raise ValueError(
                f"{where}: no numeric feature columns besides the label, client and split "
                "columns; name them with features="
            )
        return names
    if isinstance(features, str):
        pattern = re.compile(re.escape(features) + r"([0-9]+)")
        found = [
            (int(m.group(1)), c)
            for c in frame.columns
            if isinstance(c, str) and (m := pattern.fullmatch(c))
        ]
        if not found:
            raise ValueError(
                f"{where}: no feature columns {features}0, {features}1, ... "
                f"(columns: {shown_labels(list(frame.columns), 8)})"
            )
        names = [c for _, c in sorted(found)]
    elif isinstance(features, (list, tuple)):
        names = list(features)
        if not names:
            raise ValueError(f"{where}: features= is an empty list")
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise ValueError(f"{where}: no feature column(s) {shown_labels(missing, 8)}")
        if len(set(names)) < len(names):
            raise ValueError(f"{where}: features= names a column more than once")
    else:
        raise TypeError(
            f"features must be a list of column names, a prefix string or None, "
            f"got {type(features).__name__}"
        )
    for c in names:
        if c in reserved:
            raise ValueError(f"{where}: feature column {c!r} is also the {reserved[c]} column")
    return names


def _numeric_looking(column) -> bool:
    """Whether a column is a feature without ``features=``: numeric (booleans excluded), or
    text of which most cells read as numbers (a feature column with a typo, which
    :func:`_feature_matrix` then refuses, naming the cell)."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    if is_bool_dtype(column):
        return False
    if is_numeric_dtype(column):
        return True
    filled = column.dropna()
    if filled.empty or not all(isinstance(v, str) for v in filled.iloc[:1000]):
        return False
    return bool(pd.to_numeric(filled, errors="coerce").notna().mean() > 0.5)


def _feature_matrix(frame, where, names: list, finite: bool = True) -> np.ndarray:
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_complex_dtype, is_numeric_dtype

    for c in names:
        column = frame[c]
        if not (is_numeric_dtype(column) or is_bool_dtype(column)) or is_complex_dtype(column):
            # the first value that is not a number (a typo in a CSV), else the first value
            numbers = pd.to_numeric(column, errors="coerce")
            words = column.notna().to_numpy() & numbers.isna().to_numpy()
            row = int(np.argmax(words)) if words.any() else 0
            raise ValueError(
                f"{where}: feature column {c!r} is not numeric (dtype {column.dtype}, "
                f"row {row} holds {column.iloc[row]!r})"
            )
    X = frame[names].to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    bad = ~np.isfinite(X)
    if finite and bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(
            f"{where}: feature column {names[col]!r} has missing or infinite values "
            f"(first in row {row}, counting rows from 0)"
        )
    return X


def _first_missing(missing: np.ndarray, where, what: str) -> None:
    if missing.any():
        raise ValueError(
            f"{where}: {what} has missing values (first in row {int(np.argmax(missing))}, "
            "counting rows from 0)"
        )


def _codes(column, where, role: str, name) -> tuple[np.ndarray, np.ndarray]:
    """Codes 0, 1, ... of a label or client column, and its sorted distinct values."""
    _first_missing(column.isna().to_numpy(), where, f"{role} column {name!r}")
    values = column.to_numpy()
    if values.dtype == object and all(isinstance(v, str) for v in values):
        values = values.astype(str)
    try:
        distinct, codes = np.unique(values, return_inverse=True)
    except TypeError:
        kinds = sorted({type(v).__name__ for v in values})
        raise ValueError(
            f"{where}: {role} column {name!r} mixes values of types {', '.join(kinds)}"
        ) from None
    return codes.reshape(-1).astype(np.int64), distinct


def _test_mask(values: np.ndarray, missing, where, name) -> np.ndarray:
    """``True`` for test rows: "test" / "train" (any case), booleans, or 1 / 0 (1: test)."""
    what = f"split column {name!r}"
    if missing is not None:
        _first_missing(np.asarray(missing, dtype=bool), where, what)
    if values.dtype == bool:
        return values.copy()
    if np.issubdtype(values.dtype, np.number):
        bad = ~np.isin(values, (0, 1))
        is_test = values == 1
    else:
        words = [_SPLIT_WORDS.get(v.strip().lower()) if isinstance(v, str) else v for v in values]
        bad = np.array([not isinstance(w, (bool, np.bool_)) for w in words])
        is_test = np.array([isinstance(w, (bool, np.bool_)) and bool(w) for w in words])
    if bad.any():
        examples = list(dict.fromkeys(values[bad].tolist()))[:3]
        raise ValueError(
            f"{where}: {what} must hold 'train'/'test', booleans or 0/1 (True or 1: test), "
            f"got {', '.join(repr(v) for v in examples)}"
        )
    return np.asarray(is_test, dtype=bool)
