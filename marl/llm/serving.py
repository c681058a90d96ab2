"""A plain, merged copy of a LoRA-adapted policy, for generation.

peft runs every adapted linear as a wrapper around three (the frozen base
layer, then ``A``, dropout, ``B`` and the scaling), on every forward pass.
Sampling is forward passes of a single token, so on a small model that
wrapper is most of the time: the embedded model with rank-4 adapters on all
its linears generates about 1.4x slower than the same model without them (on
the CPU; a GPU, bound by kernel launches there, loses more).

:class:`MergedLoRA` keeps a copy of the model without the wrappers whose
adapted linears hold ``W + scaling * B @ A`` (peft's own merge, to the bit),
recomputed from the trained adapters by :meth:`MergedLoRA.refresh` after each
update. The base weights are never merged into and unmerged from, so they do
not drift. Everything else (embeddings, norms, the linears without an adapter)
is the very parameter the trained model holds, so the copy costs the memory of
the adapted weights only.

Only plain LoRA on linear layers is merged this way (the adapters of
``peft.LoraConfig(target_modules=..., r=..., lora_alpha=..., lora_dropout=...,
use_rslora=..., lora_bias=...)``); a model with other trainable parts (DoRA and
the other variants, embedding or convolution adapters, ``modules_to_save``) is
refused by :func:`merged_lora_copy`, and its trainer serves the wrapped
model itself, as before.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["MergedLoRA", "merged_lora_copy", "unsupported_for_merging"]


def _tuner_layer_types() -> tuple[Any, Any]:
    import peft.tuners.lora as lora
    from peft.tuners.tuners_utils import BaseTunerLayer

    return BaseTunerLayer, lora.Linear


def _has_bias(layer: Any, adapter: str) -> bool:
    """Whether ``adapter``'s B carries a bias (peft's ``lora_bias``, 0.14 and later)."""
    return bool(getattr(layer, "lora_bias", {}).get(adapter, False))


def unsupported_for_merging(peft_model: Any) -> str | None:
    """Why :class:`MergedLoRA` cannot serve ``peft_model`` (``None``: it can)."""
    base_tuner, lora_linear = _tuner_layer_types()
    tree = peft_model.get_base_model()
    covered: set[int] = set()
    holders: dict[int, int] = {}  # parameter -> how many places hold it (tied weights: more than one)
    for _, p in tree.named_parameters(remove_duplicate=False):
        holders[id(p)] = holders.get(id(p), 0) + 1
    for name, module in tree.named_modules():
        if not isinstance(module, base_tuner):
            continue
        if type(module) is not lora_linear:
            kind = f"{type(module).__module__}.{type(module).__qualname__}"
            return f"{name} is a {kind}, not a LoRA linear layer (peft.tuners.lora.Linear)"
        if module.merged:
            return f"{name} has adapters merged into its base weights"
        variants = getattr(module, "lora_variant", {})  # peft 0.16 and later; earlier: use_dora only
        for adapter in module.active_adapters:
            if adapter in variants:
                return f"{name}'s adapter {adapter!r} is a LoRA variant ({type(variants[adapter]).__name__})"
            if getattr(module, "use_dora", {}).get(adapter, False):
                return f"{name}'s adapter {adapter!r} is a LoRA variant (DoRA)"
        if holders.get(id(module.get_base_layer().weight), 0) > 1:
            # merging writes into the tied weight too (peft's merge does): a copy would differ
            return f"{name}'s weight is tied to another parameter"
        covered.update(id(p) for p in module.lora_A.parameters())
        covered.update(id(p) for p in module.lora_B.parameters())
    for name, p in peft_model.named_parameters():
        if p.requires_grad and id(p) not in covered:
            return f"{name} is trained but is not part of a LoRA linear adapter"
    return None


def merged_lora_copy(peft_model: Any) -> MergedLoRA | None:
    """A :class:`MergedLoRA` of ``peft_model`` (refreshed), or ``None`` where it has
    trainable parts that a plain merge does not cover (:func:`unsupported_for_merging`)."""
    if unsupported_for_merging(peft_model) is not None:
        return None
    return MergedLoRA(peft_model)


class MergedLoRA:
    """A copy of ``peft_model``'s model without peft's wrappers, its adapted
    linears holding the merged weights (see the module's text).

    ``module`` is the copy (in eval mode); call :meth:`refresh` after the
    adapters change. Raises ``ValueError`` where the model has trainable parts a
    plain merge does not cover (:func:`unsupported_for_merging` says which).
    """

    def __init__(self, peft_model: Any) -> None:
        why = unsupported_for_merging(peft_model)
        if why is not None:
            raise ValueError(f"cannot serve this peft model from merged weights: {why}")
        base_tuner, _ = _tuner_layer_types()
        self.peft_model = peft_model
        tree = peft_model.get_base_model()
        self.layers: dict[str, Any] = {n: m for n, m in tree.named_modules() if isinstance(m, base_tuner)}
        # Every parameter is shared with the trained model but the adapted layers' weights
        # (and biases, where an adapter carries one), which get storage of their own.
        memo: dict[int, Any] = {id(p): p for p in tree.parameters()}
        for layer in self.layers.values():
            base = layer.get_base_layer()
            for attr in self._merged_attrs(layer):
                p = getattr(base, attr)
                memo[id(p)] = torch.nn.Parameter(p.detach().clone(), requires_grad=False)
        plain = copy.deepcopy(tree, memo)
        self.targets: dict[str, Any] = {}
        for name in self.layers:
            parent_name, _, child = name.rpartition(".")
            parent = plain.get_submodule(parent_name)
            unwrapped = getattr(parent, child).get_base_layer()
            setattr(parent, child, unwrapped)
            self.targets[name] = unwrapped
        self.module = plain.eval()
        self.refresh()

    @staticmethod
    def _merged_attrs(layer: Any) -> tuple[str, ...]:
        with_bias = any(_has_bias(layer, a) for a in layer.active_adapters)
        return ("weight", "bias") if with_bias else ("weight",)

    @torch.no_grad()
    def refresh(self) -> None:
        """Write ``W + scaling * B @ A`` of every active adapter into the copy's adapted
        linears, as peft's ``merge`` would (the same operations in the same order, so the
        same bits as ``merge_and_unload``), from the trained model's current adapters."""
        for name, layer in self.layers.items():
            base = layer.get_base_layer()
            target = self.targets[name]
            target.weight.copy_(base.weight)
            if "bias" in self._merged_attrs(layer):
                target.bias.copy_(base.bias)
            if layer.disable_adapters:
                continue
            for adapter in layer.active_adapters:
                if adapter not in layer.lora_A:
                    continue
                target.weight += layer.get_delta_weight(adapter)
                if _has_bias(layer, adapter):
                    target.bias += layer.lora_B[adapter].bias * layer.scaling[adapter]
        self.module.eval()

    def nbytes(self) -> int:
        """Bytes of the storage the copy holds of its own (the adapted weights)."""
        own = 0
        for name, layer in self.layers.items():
            for attr in self._merged_attrs(layer):
                t = getattr(self.targets[name], attr)
                own += t.numel() * t.element_size()
        return own
