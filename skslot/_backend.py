"""Where the heavy kernels run: NumPy on the host, or torch on a tensor's device.

skslot's protocol objects (summaries, the reference, maps) are small,
``O(m^2)``, and live on the host as NumPy float64, where they are validated
and serialised.  The expensive work runs where the data is: the Gram matrices
of a client's rows (``O(n m^2)``), the barycenter's eigendecompositions
(``O(K m^3)`` per iteration, batched over clients) and the maps applied to
rows (``O(n m^2)``).  The kernels are written once, with operators and array
methods NumPy arrays and torch tensors share (``@``, ``.swapaxes``, ``.clip``,
``**``, ``.sum``); the few module functions they need (factorisations,
constructors) come from here.  torch is imported only when a tensor is seen,
so it stays an optional dependency.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import numpy as np


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _torch() -> ModuleType:
    try:
        import torch
    except ModuleNotFoundError as exc:  # pragma: no cover - only without the extra
        raise ImportError("this needs PyTorch: pip install torch (see the 'torch' extra)") from exc
    return torch


def linalg(A: Any) -> ModuleType:
    """``numpy.linalg`` or ``torch.linalg``, matching ``A``.

    Both provide ``eigh`` (batched, ascending eigenvalues), ``cholesky``,
    ``eigvalsh``, ``norm`` and ``LinAlgError`` with the same meaning.
    """
    return _torch().linalg if is_tensor(A) else np.linalg


def to_backend(a: Any, like: Any = None, *, device: Any = None, dtype: Any = None) -> Any:
    """``a`` as an array of ``like``'s kind (a tensor on its device) or on ``device``.

    With neither, ``a`` is returned as a NumPy array.  The dtype is float64
    unless given (a torch dtype for tensors).
    """
    if device is None and like is not None and is_tensor(like):
        device = like.device
    if device is None:
        return np.asarray(a, dtype=np.float64 if dtype is None else dtype)
    torch = _torch()
    return torch.as_tensor(a, dtype=torch.float64 if dtype is None else dtype, device=device)


def as_host_rows(X: Any) -> Any:
    """Any array as something NumPy reads: tensors and other Array API arrays to host NumPy.

    A torch tensor leaves its device (detached from autograd); an array of
    another Array API namespace (``array_api_strict``, CuPy, JAX...) is read
    through DLPack, or ``__array__`` where DLPack is not available; NumPy
    arrays, pandas objects and lists are returned unchanged, for
    scikit-learn's ``validate_data``.
    """
    if is_tensor(X):
        return X.detach().cpu().numpy()
    if hasattr(X, "__array_namespace__") and not isinstance(X, np.ndarray):
        try:
            return np.from_dlpack(X)
        except (TypeError, RuntimeError, BufferError, AttributeError):
            return np.asarray(X)
    return X


def as_host(a: Any) -> np.ndarray:
    """A NumPy float64 copy of an array or tensor (tensors leave their device)."""
    if is_tensor(a):
        a = a.detach().cpu().numpy()
    return np.array(a, dtype=np.float64)


def as_kind_of(a: Any, like: Any) -> Any:
    """``a`` in ``like``'s kind: a tensor of ``like``'s dtype on its device, or NumPy float64."""
    if is_tensor(like):
        return to_backend(a, like, dtype=like.dtype)
    return as_host(a)


def empty_like_rows(X: Any, shape: tuple[int, ...], float64: bool = False) -> Any:
    """An uninitialised array of ``shape`` with ``X``'s kind, device and float dtype."""
    if is_tensor(X):
        torch = _torch()
        dtype = torch.float64 if float64 or X.dtype != torch.float32 else X.dtype
        return torch.empty(shape, dtype=dtype, device=X.device)
    dtype = np.float64 if float64 or X.dtype != np.float32 else np.float32
    return np.empty(shape, dtype=dtype)


def stack(arrays: list) -> Any:
    """Stack same-shaped arrays or tensors along a new first axis."""
    if is_tensor(arrays[0]):
        return _torch().stack(arrays)
    return np.stack(arrays)


def concatenate(arrays: list) -> Any:
    """Join arrays or tensors along their first axis (a single one is returned as is)."""
    if len(arrays) == 1:
        return arrays[0]
    if is_tensor(arrays[0]):
        return _torch().cat(arrays)
    return np.concatenate(arrays)


def matmul_into(A: Any, B: Any, out: Any) -> Any:
    """``out[...] = A @ B`` in ``out``'s dtype (``A`` is cast, never copied whole).

    A tensor ``A`` that requires grad is multiplied out of place and written
    by indexing, so autograd tracks ``out``.
    """
    if is_tensor(A) and A.requires_grad:
        out[...] = A.to(out.dtype) @ B
        return out
    if is_tensor(out):
        return _torch().matmul(A.to(out.dtype), B, out=out)
    return np.matmul(A, B, out=out, dtype=out.dtype, casting="unsafe")


def subtract_into(A: Any, b: Any, out: Any) -> Any:
    """``out[...] = A - b`` in ``out``'s dtype, in one pass."""
    if is_tensor(out):
        return _torch().sub(A.to(out.dtype), b, out=out)
    return np.subtract(A, b, out=out, casting="unsafe")


def row_norms_squared_into(Z: Any, out: Any) -> Any:
    """``out[i] = ||Z[i]||^2`` without a temporary the size of ``Z`` (NumPy)."""
    if is_tensor(Z):
        return _torch().sum(Z * Z, dim=1, out=out)
    return np.einsum("ij,ij->i", Z, Z, out=out)


def row_index(rows: np.ndarray, like: Any) -> Any:
    """Host row indices as an index of ``like`` (a tensor on its device), for reads and writes."""
    if is_tensor(like):
        return _torch().as_tensor(rows, device=like.device)
    return rows
