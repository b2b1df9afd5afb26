"""Stage 2 never loads a backbone: importing every tosca_heads module pulls in no timm/torchvision."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_tosca_heads_imports_no_timm_or_torchvision() -> None:
    code = (
        "import sys, pkgutil, importlib, tosca_heads\n"
        "for m in pkgutil.iter_modules(tosca_heads.__path__): importlib.import_module('tosca_heads.' + m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('timm', 'torchvision'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
