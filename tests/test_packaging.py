"""The distribution as a newcomer gets it: the built wheel, installed in a fresh virtualenv,
runs the README's election example in two processes on a real broker."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from pathlib import Path

import pytest

import coordination
from tests._versions import ON_ONE_KAFKA_VERSION

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    """The Python block of the README's "Install and elect a leader" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Install and elect a leader", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one Python example"
    code = str(blocks[0])
    # A group of its own: the tests of a run share their brokers, and this test runs twice.
    assert '"elect-demo"' in code
    return code.replace('"elect-demo"', f'"elect-demo-{uuid.uuid4().hex[:8]}"')


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    subprocess.run(
        [str(root / "bin" / "pip"), "install", "--quiet", str(wheel)], check=True, timeout=300
    )
    return root


def test_the_wheel_is_named_versioned_and_licensed_as_the_package_says(wheel: Path) -> None:
    assert wheel.name.startswith(f"kafka_coordination-{coordination.__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(meta).decode()
    assert "Name: kafka-coordination" in metadata
    assert f"Version: {coordination.__version__}" in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert {n.split("/", 1)[0] for n in names} >= {"coordination", "recipes"}


# Runs the script named by the first argument with Python's SIGINT handler installed.
_WITH_CTRL_C = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


@ON_ONE_KAFKA_VERSION
def test_a_fresh_install_runs_the_readmes_election_in_two_processes(
    venv: Path, kafka: str, tmp_path: Path
) -> None:
    (tmp_path / "elect.py").write_text(readme_example())
    help_text = subprocess.run(
        [str(venv / "bin" / "coordination"), "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "broker" in help_text

    lines: dict[str, list[str]] = {"alice": [], "bob": []}
    processes: dict[str, subprocess.Popen[str]] = {}
    readers: list[threading.Thread] = []

    def run(name: str) -> None:
        # Run from a directory outside the checkout: imports come from the virtualenv.
        process = subprocess.Popen(
            # -X faulthandler: a process that hangs is made to print every thread's stack.
            # The launcher gives the example Python's Ctrl-C handler, as a terminal's
            # Python has: a test run started in the background (`nohup ... &`) ignores
            # SIGINT, its children inherit that, and Python then installs no handler.
            [
                str(venv / "bin" / "python"),
                "-X",
                "faulthandler",
                "-c",
                _WITH_CTRL_C,
                "elect.py",
                name,
                kafka,
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        processes[name] = process
        output = process.stdout
        assert output is not None

        def read() -> None:
            for line in output:
                lines[name].append(line.strip())

        reader = threading.Thread(target=read, daemon=True)
        readers.append(reader)
        reader.start()

    def wait_for(name: str, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in lines[name]):
                return
            time.sleep(0.05)
        # Say where each process that is still running is stuck: SIGABRT makes
        # faulthandler print the stacks of all its threads, which the readers collect.
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGABRT)
        for reader in readers:
            reader.join(5)
        raise AssertionError(f"{name} never printed {text!r}: {lines}")

    try:
        run("alice")
        wait_for("alice", "alice: I lead now", 60)
        run("bob")
        wait_for("bob", "bob: alice leads", 60)
        processes["alice"].send_signal(signal.SIGINT)  # Ctrl-C
        wait_for("bob", "bob: I lead now", 30)
        processes["alice"].wait(30)  # it exits on the interrupt (TimeoutExpired if not)
        assert any("alice: I no longer lead" in line for line in lines["alice"]), lines
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
            process.wait(10)
        for reader in readers:
            reader.join(10)
        for process in processes.values():
            if process.stdout is not None:
                process.stdout.close()
