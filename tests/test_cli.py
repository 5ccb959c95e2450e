"""The `python -m namesrv` command line: -c, -p, -h, --key=value overrides, one-line errors with
exit code 2, logging configuration, and conf/namesrv.properties kept in step with NamesrvConfig."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from namesrv.cli import MACHINE_DEFAULTS, properties_template
from namesrv.client import NamesrvClient
from namesrv.config import NamesrvConfig, parse_properties
from namesrv.launcher import BOOT_LINE, NamesrvProcess

REPO = Path(__file__).resolve().parent.parent


def namesrv(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    return subprocess.run([sys.executable, "-m", "namesrv", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO)


def private(tmp_path: Path) -> list[str]:
    """Files under tmp_path and ports the kernel picks: a server that starts here meets no other."""
    return ["--listenPort=0", "--bindAddress=127.0.0.1", "--zmqListenAddress=tcp://127.0.0.1:*",
            "--httpListenAddress=127.0.0.1:0", f"--kvConfigPath={tmp_path / 'kv.json'}",
            f"--configStorePath={tmp_path / 'namesrv.properties'}"]


def assert_usage_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("namesrv: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.fixture
def busy_port() -> socket.socket:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_print_config_shows_the_effective_sorted_configuration(tmp_path) -> None:
    config_file = tmp_path / "ns.properties"
    config_file.write_text("# comment\nlistenPort = 19876\nscanNotActiveBrokerInterval:1000\n", encoding="utf-8")
    result = namesrv("-c", str(config_file), "--scanNotActiveBrokerInterval=250", "--orderMessageEnable", "true", "-p")
    assert result.returncode == 0, result.stderr
    expected = NamesrvConfig.load(str(config_file), {"scanNotActiveBrokerInterval": "250",
                                                     "orderMessageEnable": "true"})
    assert result.stdout == expected.to_text()
    printed = parse_properties(result.stdout)
    assert list(printed) == sorted(printed) == sorted(NamesrvConfig.keys())
    assert (printed["listenPort"], printed["scanNotActiveBrokerInterval"], printed["orderMessageEnable"],
            printed["configStorePath"]) == ("19876", "250", "true", str(config_file))


def test_help_exits_zero_and_explains_overrides() -> None:
    result = namesrv("-h")
    assert result.returncode == 0
    assert "--key=value" in result.stdout and "-c FILE" in result.stdout and "--printConfigItem" in result.stdout


@pytest.mark.parametrize(("args", "needles"), [
    (["--noSuchKey=1"], ["noSuchKey", "unknown configuration key"]),
    (["--listenPort=abc"], ["listenPort", "expected an integer"]),
    (["--orderMessageEnable=yes"], ["orderMessageEnable", "expected true or false"]),
    (["--defaultThreadPoolNums=-3"], ["defaultThreadPoolNums", "must not be negative"]),
    (["--listenPort"], ["listenPort", "missing value"]),
    (["stray"], ["'stray'"]),
    (["-c", "/nonexistent/namesrv.properties"], ["/nonexistent/namesrv.properties"]),
    (["--logConfig=/nonexistent/logging.conf", "--listenPort=0"], ["/nonexistent/logging.conf"]),
    (["--listenPort=70000"], ["listenPort", "0-65535"]),
    (["--clientRequestThreadPoolNums=0", "--listenPort=0"], ["clientRequestThreadPoolNums", "at least 1"]),
    (["--zmqListenAddress=nonsense", "--listenPort=0", "--bindAddress=127.0.0.1", "--httpListenAddress="],
     ["nonsense"]),
    # RocketMQ keys namesrv has no use for: never accepted and ignored
    (["--serverWorkerThreads=16"], ["serverWorkerThreads", "reactor thread", "serverWorkerProcesses",
                                    "only RocketMQ's default (8)"]),
    (["--clusterTest=true"], ["clusterTest", "not implemented", "only RocketMQ's default (false)"]),
    (["--writeBufferLowWaterMark=1024"], ["writeBufferLowWaterMark", "writeBufferHighWaterMark"]),
])
def test_bad_command_lines_fail_with_one_line_and_exit_2(args: list[str], needles: list[str], tmp_path) -> None:
    assert_usage_error(namesrv(*private(tmp_path), *args), *needles)


@pytest.mark.parametrize(("args", "needle"), [
    (["--listenPort=70000"], "0-65535"),
    (["--serverWorkerProcesses=0"], "at least 1"),
    (["--serverWorkerProcesses=256"], "at most 255"),
    (["--clusterTest=true"], "not implemented"),
])
def test_print_config_refuses_what_startup_refuses(args: list[str], needle: str) -> None:
    assert_usage_error(namesrv(*args, "-p"), needle)


def test_a_bad_key_in_the_config_file_is_named(tmp_path) -> None:
    config_file = tmp_path / "bad.properties"
    config_file.write_text("listenPort=9876\nlistenPortt=1\n", encoding="utf-8")
    assert_usage_error(namesrv("-c", str(config_file)), "listenPortt")


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(("key", "endpoint"), [
    ("listenPort", "tcp://127.0.0.1:{port} (bindAddress, listenPort)"),
    ("zmqListenAddress", "tcp://127.0.0.1:{port} (zmqListenAddress)"),
    ("httpListenAddress", "127.0.0.1:{port} (httpListenAddress)"),
])
def test_a_port_in_use_is_one_line_naming_its_keys_and_exit_2(busy_port: int, tmp_path, key: str, endpoint: str,
                                                               workers: int) -> None:
    """The port made busy here, every other one the kernel's pick: nothing else on the host matters."""
    value = {"listenPort": busy_port, "zmqListenAddress": f"tcp://127.0.0.1:{busy_port}",
             "httpListenAddress": f"127.0.0.1:{busy_port}"}[key]
    result = namesrv(*private(tmp_path), f"--{key}={value}", f"--serverWorkerProcesses={workers}")
    assert result.returncode == 2, result
    assert result.stderr == (f"namesrv: error: cannot listen on {endpoint.format(port=busy_port)}: "
                             f"Address already in use\n")


def test_the_properties_file_lists_every_key_with_its_default() -> None:
    text = (REPO / "conf" / "namesrv.properties").read_text(encoding="utf-8")
    assert text == properties_template(), "regenerate conf/namesrv.properties from namesrv.cli.properties_template()"
    active = parse_properties(text)
    defaults = NamesrvConfig().to_properties()
    assert active == {key: value for key, value in defaults.items() if key not in MACHINE_DEFAULTS}
    for key in NamesrvConfig.keys():
        assert f"# {NamesrvConfig.doc(key)}\n" in text
    for key, shown in MACHINE_DEFAULTS.items():
        assert f"# default: {shown}\n#{key}=\n" in text
    home = str(Path.home())
    assert defaults["kvConfigPath"] == MACHINE_DEFAULTS["kvConfigPath"].replace("~", home)
    assert defaults["configStorePath"] == MACHINE_DEFAULTS["configStorePath"].replace("~", home)
    assert defaults["rocketmqHome"] == os.environ.get("ROCKETMQ_HOME", "")


def test_the_shipped_properties_file_loads_as_the_defaults() -> None:
    result = namesrv("-c", "conf/namesrv.properties", "-p")
    assert result.returncode == 0, result.stderr
    printed = parse_properties(result.stdout)
    defaults = NamesrvConfig().to_properties()
    assert printed == {**defaults, "configStorePath": "conf/namesrv.properties"}


def test_the_readme_lists_the_keys_a_running_server_may_change() -> None:
    """The README's list of runtime-updatable keys is the allowlist's (conf/namesrv.properties is
    generated from it; the README is written by hand and must follow)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    listed = readme.partition("The keys a running\nserver may change")[2].partition("Any other key")[0]
    assert set(re.findall(r"`(\w+)`", listed)) == NamesrvConfig.remote_updatable()


def make_run(copy: Path, kv_file: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`make run` serving `copy` (this venv's, nothing rebuilt) on ports the kernel picks; (make, its output)."""
    venv = Path(sys.executable).parent.parent
    output = copy.parent.parent / f"make-run-{time.monotonic_ns()}.log"
    args = (f"--listenPort=0 --bindAddress=127.0.0.1 --zmqListenAddress= --httpListenAddress=127.0.0.1:0 "
            f"--kvConfigPath={kv_file}")
    with open(output, "wb") as out:  # a session of its own: make and the server stop together
        process = subprocess.Popen([shutil.which("make"), "--no-print-directory", "-o", f"{venv}/.installed", "run",
                                    f"VENV={venv}", f"RUN_CONF={copy}", f"RUN_ARGS={args}"],
                                   cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return process, output


def boot_address(process: subprocess.Popen[bytes], output: Path) -> str:
    deadline = time.monotonic() + 30
    while (match := BOOT_LINE.search(output.read_text(errors="replace"))) is None:
        assert process.poll() is None, output.read_text(errors="replace")
        assert time.monotonic() < deadline, output.read_text(errors="replace")
        time.sleep(0.05)
    return match["address"]


def stop_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_serves_a_copy_made_on_first_run_and_leaves_the_shipped_file_alone(tmp_path) -> None:
    """A newcomer's `make run` then `namesrv-admin updateNamesrvConfig`: the update lands in the copy
    (local/namesrv.properties by default, git-ignored), never in the tracked conf/namesrv.properties."""
    shipped = REPO / "conf" / "namesrv.properties"
    before = shipped.read_bytes()
    copy = tmp_path / "local" / "namesrv.properties"
    process, output = make_run(copy, tmp_path / "kv.json")
    try:
        address = boot_address(process, output)
        with NamesrvClient(address, timeout=5) as client:
            assert [result.ok for result in client.update_namesrv_config({"orderMessageEnable": "true"})] == [True]
    finally:
        stop_group(process)
    said = output.read_text()
    assert f"make run: first run: copied conf/namesrv.properties to {copy}" in said
    assert f"make run: serving {copy}" in said
    assert shipped.read_bytes() == before
    assert parse_properties(copy.read_text())["orderMessageEnable"] == "true"
    assert copy.read_text().replace("orderMessageEnable=true", "orderMessageEnable=false").encode() == before

    process, output = make_run(copy, tmp_path / "kv.json")  # the second run serves the copy as it was left
    try:
        with NamesrvClient(boot_address(process, output), timeout=5) as client:
            (served,) = client.get_namesrv_configs()
            assert served.value["orderMessageEnable"] == "true"
    finally:
        stop_group(process)
    assert "first run" not in output.read_text()
    ignored = subprocess.run(["git", "check-ignore", "-q", "local/namesrv.properties"], cwd=REPO)
    assert ignored.returncode in (0, 128), "local/ must be git-ignored"  # 128: not a git checkout


def test_log_config_points_logging_elsewhere(namesrv_factory, tmp_path) -> None:
    log_config = tmp_path / "logging.conf"
    log_config.write_text(
        "[loggers]\nkeys=root\n[handlers]\nkeys=err\n[formatters]\nkeys=f\n"
        "[logger_root]\nlevel=DEBUG\nhandlers=err\n"
        "[handler_err]\nclass=StreamHandler\nformatter=f\nargs=(sys.stderr,)\n"
        "[formatter_f]\nformat=CUSTOM|%(levelname)s|%(message)s\n", encoding="utf-8")
    server = namesrv_factory(log_config=log_config)
    server.wait_for_log(r"CUSTOM\|INFO\|The Name Server boot success")
    with socket.create_connection(("127.0.0.1", server.port)):
        server.wait_for_log(r"CUSTOM\|DEBUG\|tcp connection from 127\.0\.0\.1:\d+")


def caught_signals(pid: int) -> int:
    """The signals process `pid` has handlers for (the SigCgt mask of /proc/PID/status), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_at_any_moment_of_the_start_exits_0_without_a_traceback(tmp_path, signum: int) -> None:
    """From the first line of namesrv's own code (its handlers are in place: Python itself catches no
    SIGTERM) through the imports, the start and serving: exit 0 and not a line of traceback."""
    before_serving = 0
    for delay in (0.0, 0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8):
        process = subprocess.Popen([sys.executable, "-m", "namesrv", *private(tmp_path)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=REPO, env={
                                       **os.environ, "PYTHONPATH": os.pathsep.join(
                                           filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))})
        deadline = time.monotonic() + 20
        while not caught_signals(process.pid) & (1 << (signal.SIGTERM - 1)):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.001)
        time.sleep(delay)
        process.send_signal(signum)
        out, err = process.communicate(timeout=30)
        assert process.returncode == 0, (delay, err)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay, err)
        before_serving += "The Name Server boot success" not in err
    assert before_serving >= 1, "no signal came before the server served: the imports were not covered"


@pytest.mark.parametrize(("key", "path", "problem"), [
    ("kvConfigPath", "/etc/passwd/kv.json", "/etc/passwd is not a directory"),
    ("kvConfigPath", "{tmp}/file/kv.json", "{tmp}/file is not a directory"),
    ("kvConfigPath", "/proc/namesrv-test/kv.json", "/proc/namesrv-test cannot be created (No such file or directory)"),
    ("kvConfigPath", "{tmp}", "it is a directory"),
    ("configStorePath", "/proc/namesrv.properties", "no file can be created in /proc (No such file or directory)"),
    ("routeSnapshotPath", "/proc/routes.snapshot", "no file can be created in /proc (No such file or directory)"),
])
def test_a_file_the_server_cannot_write_is_one_line_naming_its_key_and_exit_2(tmp_path, key: str, path: str,
                                                                               problem: str) -> None:
    """Checked at start (namesrv.state_files), not at the first updateKvConfig hours later."""
    (tmp_path / "file").write_text("a file, not a folder")
    path, problem = path.format(tmp=tmp_path), problem.format(tmp=tmp_path)
    result = namesrv(*private(tmp_path), f"--{key}={path}")
    assert (result.returncode, result.stdout) == (2, ""), result
    assert result.stderr == f"namesrv: error: {key}: cannot write {path}: {problem}\n"



def test_the_launcher_gives_an_older_checkout_the_kernel_picked_ports_it_knows(tmp_path) -> None:
    """bench.attacks --source runs another checkout's server: every port the kernel's pick, HTTP included
    (the key is asked of the checkout, whose `-p` lists the keys it knows), never a default one."""
    server = NamesrvProcess(workdir=tmp_path, source_root=REPO)
    assert {"--listenPort=0", "--zmqListenAddress=tcp://127.0.0.1:*", "--httpListenAddress=127.0.0.1:0"} <= set(
        server.command)
