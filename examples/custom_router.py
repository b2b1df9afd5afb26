"""A router of your own, compared with the built-in ones on the same run.

    python examples/custom_router.py --store cache/eurosat/effnet_lite0-demo300.zarr

The router here, `confident`, picks the module whose softmax is peaked and whose logits are large
(its entropy plus a tenth of its energy, lowest first), where the paper's `entropy` reads the
entropy alone. It is registered before the fit, so the evaluation reports it beside the others;
with this file named in TOSCA_PLUGINS the command line (`tosca fit`, `tosca routers`) shows it too.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import tosca_heads
from tosca_heads import Router, StageView, register_router


@register_router
class Confident(Router):
    name = "confident"
    summary = "entropy plus a tenth of the energy, lowest first (an example plug-in)"

    def route(self, view: StageView) -> torch.Tensor:
        # [G, M, n] per configuration, module and sample: a lower entropy is a more peaked softmax,
        # a lower energy (-logsumexp) larger logits
        return (view.entropy + 0.1 * view.energy).argmin(1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    result = tosca_heads.fit(args.store, epochs=args.epochs)
    routers = result.metrics()["routers"]
    print(f"{'router':<16}{'A_last':>8}{'routing':>9}  honest")
    for name, block in sorted(routers.items(), key=lambda item: -item[1]["A_last"]):
        honest = "yes" if tosca_heads.ROUTERS[name].honest else "no"
        print(f"{name:<16}{100 * block['A_last']:>8.2f}{100 * block['routing_accuracy']:>9.2f}  {honest}")


if __name__ == "__main__":
    main()
