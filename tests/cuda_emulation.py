"""A CUDA device emulated on the CPU, to check device placement without a GPU.

Inside :func:`emulated_cuda`, ``torch.cuda.is_available()`` is true and a
tensor made on or moved to ``"cuda"`` is a CPU tensor wrapped in
:class:`EmulatedTensor`, a tensor subclass whose device reads as the
accelerator. Every torch operation passes through :class:`_Placement`, which
runs it on the wrapped CPU tensors and raises :class:`PlacementError`, as CUDA
raises, where an operation mixes an accelerator tensor with a CPU tensor of one
or more dimensions (a 0-dimensional CPU tensor is a scalar CUDA accepts, and so
is a CPU index into an accelerator tensor), where a random generator lives on
the other device; turning an accelerator tensor into numpy raises as on CUDA.
Results are those of the CPU kernels, so a path run on the emulated device can
be compared with the same path on the CPU; what is checked is where each
tensor lives, the class of bug a first run on a GPU finds.

What it does not check: CUDA's kernels, their numerics, memory and speed
(``make gpu-check`` on a GPU measures those). Where torch picks another kernel
for an accelerator (attention runs its math form here, not the CPU's flash
kernel), results agree with the CPU's to rounding only. Tensors pickled with
``torch.save`` are written as CPU tensors: what a CUDA tensor loads as with
``map_location="cpu"``, which every load in the package passes.

The emulated device is torch's private-use backend renamed ``emucuda`` (a
device with a registered device guard, which indexing needs and which a CPU
build of torch cannot give ``cuda`` itself). Code keeps naming ``cuda``:
``torch.device("cuda")`` stays what it is, and operations asked for it land on
``emucuda``; but a tensor's ``.device`` reads ``emucuda:0``, so code that
branches on ``tensor.device.type == "cuda"`` takes its other branch here.

The backend is registered when this module is imported, for the life of the
process, and must be before the process's first backward pass (torch's
autograd engine sets up its devices then): the tests that use it run in a
process of their own (``tests/emulated_cuda``, started by
``tests/test_emulated_cuda.py``).
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
import torch.utils.backend_registration as backend_registration
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

NAME = "emucuda"
aten = torch.ops.aten


class PlacementError(RuntimeError):
    """An operation mixed the emulated accelerator and the CPU where CUDA refuses it."""


def _accelerator() -> torch.device:
    return torch.device(NAME, 0)


def _is_accelerator(device: Any) -> bool:
    return device is not None and torch.device(device).type in ("cuda", NAME)


class EmulatedTensor(torch.Tensor):
    """A CPU tensor (``inner``) that reads as living on the emulated accelerator."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> EmulatedTensor:
        if type(inner) is not torch.Tensor or inner.device.type != "cpu":
            raise TypeError(
                f"EmulatedTensor wraps plain CPU tensors, not {type(inner).__name__} on {inner.device}"
            )
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.size(),
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=_accelerator(),
            requires_grad=False,
        )
        out.inner = inner
        return out

    # Flattening makes it a "traceable wrapper subclass", which torch's ``Module._apply`` moves by
    # swapping the parameter's contents in place: a parameter two modules share (tied input and
    # output embeddings) stays one parameter, as ``.data =`` keeps it on CUDA.
    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(
        inner_tensors: dict, meta: Any, outer_size: Any, outer_stride: Any
    ) -> EmulatedTensor:
        return EmulatedTensor(inner_tensors["inner"])

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"EmulatedTensor({self.inner!r}, device='{NAME}:0')"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.tolist:
            _record("tolist")
        if func in (torch.Tensor.untyped_storage, torch.Tensor.data_ptr, torch.Tensor.tolist):
            # storage identity (tied weights, aliasing) is the wrapped tensor's; ``tolist`` copies to
            # the host, as on CUDA
            return func(args[0].inner, *args[1:], **kwargs)
        if func is torch.Tensor.__reduce_ex__:
            # pickled (torch.save) as the CPU tensor it holds: what every load in the package gets
            # from a CUDA tensor, as each passes map_location="cpu"
            return args[0].inner.__reduce_ex__(*args[1:])
        if func is torch.Tensor.numpy:
            raise TypeError(
                f"can't convert {NAME}:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                "to host memory first."
            )
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise PlacementError(f"{func}: an emulated accelerator tensor outside emulated_cuda()")


# operations that take tensors of two devices on CUDA too
_CROSS_DEVICE = {
    aten._to_copy.default,
    aten.to.device,
    aten.to.dtype_layout,
    aten.to.other,
    aten.copy_.default,
    aten._copy_from.default,
    aten._copy_from_and_resize.default,
}
# indexing: the indexed tensor decides; CUDA accepts CPU indices for it
_INDEXING = {
    aten.index.Tensor,
    aten.index_put_.default,
    aten.index_put.default,
    aten._index_put_impl_.default,
}


# the types of almost every argument an operation gets: leaves, without asking pytree
_LEAF_TYPES = {int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.layout}
_LEAF_TYPES |= {torch.memory_format, torch.Tensor, torch.nn.Parameter}


def _tree_map(fn: Any, tree: Any) -> Any:
    """``pytree.tree_map`` with a fast path for the plain tuples, lists and dicts that operations take
    (the emulation maps every argument of every operation, and pytree's generality cost half the
    emulated suite's time); any other container goes to pytree, so the result is the same."""
    kind = type(tree)
    if kind in _LEAF_TYPES or kind is EmulatedTensor:
        return fn(tree)
    if kind is tuple:
        return tuple([_tree_map(fn, x) for x in tree])
    if kind is list:
        return [_tree_map(fn, x) for x in tree]
    if kind is dict:
        return {k: _tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list, dict)) or not pytree.tree_is_leaf(tree):
        return pytree.tree_map(fn, tree)
    return fn(tree)


def _tree_leaves(tree: Any, out: list[Any]) -> list[Any]:
    """``pytree.tree_leaves`` (appended to ``out``) with the same fast path as :func:`_tree_map`."""
    kind = type(tree)
    if kind in _LEAF_TYPES or kind is EmulatedTensor:
        out.append(tree)
    elif kind is tuple or kind is list:
        for x in tree:
            _tree_leaves(x, out)
    elif kind is dict:
        for x in tree.values():
            _tree_leaves(x, out)
    elif isinstance(tree, (tuple, list, dict)) or not pytree.tree_is_leaf(tree):
        out.extend(pytree.tree_leaves(tree))
    else:
        out.append(tree)
    return out


def _on_cpu(x: Any) -> Any:
    """The wrapped tensor for an emulated one, the CPU for the emulated device."""
    if isinstance(x, EmulatedTensor):
        return x.inner
    if isinstance(x, torch.device) and _is_accelerator(x):
        return torch.device("cpu")
    return x


def _wrap(x: Any) -> Any:
    if type(x) is not torch.Tensor:
        return x
    # a wrapper made under inference mode would be an inference tensor, and torch's view tracking of a
    # normal tensor sliced there refuses one: the wrappers are normal tensors (their contents are what
    # the operation made)
    with torch.inference_mode(False):
        return EmulatedTensor(x)


# operations whose result the host must wait for on CUDA: a value read back, or an output whose
# size depends on the data
_SYNCING = {
    aten._local_scalar_dense.default: "a value read on the host (.item(), int(), float(), bool())",
    # the same under inference mode, where these reach the emulation before decomposing
    aten.item.default: "a value read on the host (.item(), int(), float(), bool())",
    aten.is_nonzero.default: "a value read on the host (.item(), int(), float(), bool())",
    aten.equal.default: "a value read on the host (torch.equal)",
    aten.allclose.default: "a value read on the host (torch.allclose)",
    aten.nonzero.default: "nonzero (its size depends on the data)",
    aten.masked_select.default: "masked_select (its size depends on the data)",
    aten._unique2.default: "unique (its size depends on the data)",
    aten.unique_consecutive.default: "unique_consecutive (its size depends on the data)",
    aten.unique_dim.default: "unique (its size depends on the data)",
    aten.repeat_interleave.Tensor: "repeat_interleave without output_size (its size depends on the data)",
}
_ROOT = Path(__file__).resolve().parents[1]
_PACKAGE = tuple(str(_ROOT / layer) + "/" for layer in ("agents", "topology", "marl", "evolve"))


@dataclass(frozen=True)
class HostSync:
    """A point where the host waits for the device on CUDA: what, and the package line that did it."""

    what: str
    where: str


class Emulation:
    """What :func:`emulated_cuda` yields: the host synchronisations recorded so far."""

    def __init__(self) -> None:
        self.syncs: list[HostSync] = []

    def record(self, what: str) -> None:
        where = "outside the package"
        for frame in reversed(traceback.extract_stack()):
            if frame.filename.startswith(_PACKAGE):
                where = f"{Path(frame.filename).relative_to(_ROOT)}:{frame.lineno}"
                break
        self.syncs.append(HostSync(what, where))


_current: Emulation | None = None


def _record(what: str) -> None:
    if _current is not None:
        _current.record(what)


class _Placement(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        leaves = _tree_leaves(args, [])
        _tree_leaves(kwargs, leaves)
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        on_acc = any(isinstance(t, EmulatedTensor) for t in tensors)
        # a device named in the call, as keyword or (under inference mode, ``aten.to.device``) positionally
        device = next((d for d in leaves if isinstance(d, torch.device)), None)
        if func in _CROSS_DEVICE:
            pass
        elif func in _INDEXING:
            self._check_indexing(func, args, on_acc)
        elif on_acc:
            for t in tensors:
                if not isinstance(t, EmulatedTensor) and t.dim() > 0:
                    raise PlacementError(
                        "Expected all tensors to be on the same device, but found at least two devices, "
                        f"{NAME}:0 and cpu! ({func}, a CPU tensor of shape {tuple(t.shape)})"
                    )
        # where the result lives
        if func is aten.to.other:
            to_acc = isinstance(args[1], EmulatedTensor)
        elif device is not None:
            to_acc = _is_accelerator(device)
        elif func in _CROSS_DEVICE:
            to_acc = isinstance(args[0], EmulatedTensor)
        else:
            to_acc = on_acc
        if on_acc or to_acc:
            self._note_sync(func, args, to_acc)
        uargs, ukwargs = _tree_map(_on_cpu, args), _tree_map(_on_cpu, kwargs)
        ukwargs.pop("pin_memory", None)
        out = func(*uargs, **ukwargs)
        # an in-place or out= operation returns the tensor it wrote: give back that very object
        returns = func._schema.returns
        if len(returns) == 1 and returns[0].alias_info is not None and returns[0].alias_info.is_write:
            for original, plain in [(a, _on_cpu(a)) for a in (*args, kwargs.get("out"))]:
                if plain is out:
                    return original
        return _tree_map(_wrap, out) if to_acc else out

    @staticmethod
    def _note_sync(func, args, to_acc: bool) -> None:
        if func in _SYNCING:
            _record(_SYNCING[func])
        elif func in _CROSS_DEVICE:
            src = args[1] if func in (aten.copy_.default, aten._copy_from.default) else args[0]
            if isinstance(src, EmulatedTensor) and not to_acc:
                _record("a copy to the host")
            elif isinstance(src, torch.Tensor) and not isinstance(src, EmulatedTensor) and to_acc:
                _record("a copy from the host")
        elif func in _INDEXING:
            masks = args[1] if len(args) > 1 else ()
            if any(isinstance(m, torch.Tensor) and m.dtype == torch.bool for m in masks or ()):
                _record("indexing by a boolean mask (its size depends on the data)")

    @staticmethod
    def _check_indexing(func, args, on_acc: bool) -> None:
        if not on_acc:
            return
        base = args[0]
        if not isinstance(base, EmulatedTensor):
            raise PlacementError(f"{func}: indices on {NAME}:0 for a tensor on cpu")
        if func is not aten.index.Tensor and len(args) > 2:
            values = args[2]
            if (
                isinstance(values, torch.Tensor)
                and not isinstance(values, EmulatedTensor)
                and values.dim() > 0
            ):
                raise PlacementError(f"{func}: values on cpu written into a tensor on {NAME}:0")


def _to_emulated(x: Any) -> Any:
    """``cuda`` (a device or its name) as the emulated device; anything else unchanged."""
    if isinstance(x, torch.device) and x.type == "cuda":
        return torch.device(NAME, x.index or 0)
    if isinstance(x, str) and (x == "cuda" or x.startswith("cuda:")):
        return torch.device(NAME, int(x[5:] or 0))
    return x


class _CudaNames(TorchFunctionMode):
    """Hands torch ``emucuda`` wherever code names ``cuda``: torch's C++ side
    would otherwise ask for the CUDA device guard a CPU build lacks."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.device:  # the name stays ``cuda``; the tensors made for it get ``emucuda``
            return func(*args, **(kwargs or {}))
        args, kwargs = _tree_map(_to_emulated, args), _tree_map(_to_emulated, kwargs or {})
        generator = kwargs.get("generator")
        if generator is not None:
            # checked here, where the generator is still the object the code made
            device = kwargs.get("device")
            if device is None:
                device = next((a.device for a in args if isinstance(a, torch.Tensor)), "cpu")
            if getattr(generator, "emulated", False) != _is_accelerator(device):
                raise PlacementError(
                    f"{func.__name__}: a generator on {generator.device} for a tensor on {device}"
                )
        if func is torch.Tensor.cuda:
            device = args[1] if len(args) > 1 else kwargs.pop("device", None)
            device = torch.device(NAME, 0 if device is None or isinstance(device, str) else int(device))
            kwargs.pop("memory_format", None)
            return args[0].to(device, non_blocking=kwargs.get("non_blocking", False))
        if func is torch.gru_cell and any(isinstance(a, EmulatedTensor) for a in args[:2]):
            return _gru_cell(*args, **kwargs)
        if func in _FROM_DATA:
            device = kwargs.get("device")
            if func is torch.Tensor.new_tensor and device is None:
                device = args[0].device
            if _is_accelerator(device):
                # torch builds these below its dispatcher, where the emulation is not: build on the
                # CPU, then move
                grad = kwargs.pop("requires_grad", False)
                kwargs["device"] = "cpu"
                out = func(*args, **kwargs).to(device)
                return out.requires_grad_() if grad else out
        return func(*args, **kwargs)


def _gru_cell(
    input: torch.Tensor,
    hx: torch.Tensor,
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    b_ih: torch.Tensor | None = None,
    b_hh: torch.Tensor | None = None,
) -> torch.Tensor:
    """``torch.gru_cell`` as torch computes it on the CPU, op for op. On an accelerator torch
    fuses it into ``_thnn_fused_gru_cell``, which has no CPU kernel to run the emulation on."""
    ig = torch.nn.functional.linear(input, w_ih, b_ih).chunk(3, 1)
    hg = torch.nn.functional.linear(hx, w_hh, b_hh).chunk(3, 1)
    reset = (hg[0] + ig[0]).sigmoid()
    update = (hg[1] + ig[1]).sigmoid()
    new = (ig[2] + hg[2] * reset).tanh()
    return (hx - new) * update + new


# tensors made from Python data or arrays
_FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor}

# Registered on import: torch's autograd engine sizes its per-device queues at the process's first
# backward pass, so the device must exist before it (import this module before any training).
backend_registration._setup_privateuseone_for_python_backend(NAME)


@contextlib.contextmanager
def emulated_cuda() -> Iterator[Emulation]:
    """Run the body with ``cuda`` emulated on the CPU (see the module's text); the
    :class:`Emulation` it yields records where the host waits for the device."""
    global _current
    real_generator = torch.Generator

    class Generator(real_generator):  # type: ignore[misc,valid-type]
        """A CPU generator that reads as the accelerator's when made for it."""

        def __new__(cls, device: Any = None) -> Generator:
            g = real_generator.__new__(cls, "cpu")
            g.emulated = _is_accelerator(device)
            return g

        def __init__(self, device: Any = None) -> None:
            pass

        @property
        def device(self) -> torch.device:  # type: ignore[override]
            return _accelerator() if self.emulated else torch.device("cpu")

    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, value: Any) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    cuda = torch.cuda
    patch(torch, "Generator", Generator)
    patch(cuda, "_lazy_init", lambda: None)
    patch(cuda, "is_available", lambda: True)
    patch(cuda, "device_count", lambda: 1)
    patch(cuda, "current_device", lambda: 0)
    patch(cuda, "set_device", lambda device: None)
    patch(cuda, "synchronize", lambda device=None: None)
    patch(cuda, "empty_cache", lambda: None)
    patch(cuda, "reset_peak_memory_stats", lambda device=None: None)
    patch(cuda, "max_memory_allocated", lambda device=None: 0)
    patch(cuda, "get_device_name", lambda device=None: "emulated CUDA (on the CPU)")
    patch(cuda, "is_bf16_supported", lambda *a, **k: True)
    patch(cuda, "manual_seed", lambda seed: None)
    patch(cuda, "manual_seed_all", lambda seed: None)
    patch(cuda, "get_rng_state_all", list)
    patch(cuda, "set_rng_state_all", lambda states: None)
    outer, _current = _current, Emulation()
    try:
        with _CudaNames(), _Placement():
            yield _current
    finally:
        _current = outer
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
