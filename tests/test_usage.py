"""launcher/usage.py and cli.py: `dali-launch` alone prints its help and contacts nothing, `-h` works for
every command, `--version` says the package and the checkout. Unknown flags: test_catalogue_other.py."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import CLI, REPO

from dali_launch.launcher.cli import app, main
from dali_launch.launcher.usage import flags_by_command

COMMANDS = sorted(flags_by_command(app))


def test_dali_launch_alone_prints_its_help_and_submits_nothing(capsys, nothing_starts, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no sinfo: nothing may be asked of SLURM either
    assert main([]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("Usage: dali-launch [OPTIONS] COMMAND [ARGS]...") and out.err == ""
    assert "`dali-launch` alone prints this" in out.out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_dash_h(capsys, command):
    assert main([*command.split()[1:], "-h"]) == 0
    assert capsys.readouterr().out.startswith(f"Usage: {command} ")


def test_version_names_the_package_and_the_checkout():
    proc = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60, cwd="/")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert proc.returncode == 0 and proc.stderr == ""
    assert re.fullmatch(r"dali-launch 0\.1\.0 \(git ([0-9a-f]{10})(, modified)?\)\n", proc.stdout), proc.stdout
    assert head.startswith(proc.stdout.split("git ")[1][:10])
