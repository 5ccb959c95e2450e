"""The heartbeat storm: request templates, fleet shape, and short real storms against a real namesrv."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest
from hdrh.log import HistogramLogReader

from bench.heartbeat_storm import StormSettings, run_storm
from bench.lib.fleet import HEARTBEAT, REGISTER, ROUTE, FleetShape, heartbeat_template, register_body, \
    register_template, route_template
from bench.lib.hdr import new_histogram
from bench.storm.subscriber import choose_topics
from bench.lib.fleet import FrameTemplate
from bench.lib.hdr import generator_layout
from bench.lib.servers import core_plan
from bench.storm.worker import WorkerPlan, WorkerRequests, start_shielded_from_sigint
from namesrv.fastpath import RequestGenerator
from namesrv.protocol import DataVersion, FrameDecoder, RegisterBrokerBody, RemotingCommand, RequestCode, \
    SerializeType

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_template_renders_exactly_what_the_encoder_writes(serialize_type):
    command = RemotingCommand.request(105, {"topic": "t-1", "acceptStandardJsonOnly": True}, b"body",
                                      serialize_type=serialize_type)
    template = FrameTemplate(command)
    for opaque in (0, 1, 9, 12345, 2_059_198_193, 2**31 - 1):
        command.opaque = opaque
        assert template.render(opaque) == command.encode()
        decoded = RemotingCommand.decode(template.render(opaque)[4:])
        assert decoded.opaque == opaque and decoded.ext_fields["topic"] == "t-1" and decoded.body == b"body"


def test_fleet_identities_bodies_and_rates():
    fleet = FleetShape(brokers=6, slaves_per_master=1, topics_per_broker=3, queues_per_topic=4, clusters=2,
                       register_period_s=2, heartbeat_period_s=1, route_clients=10, route_poll_period_s=5)
    assert fleet.groups == 3
    assert fleet.rates() == {REGISTER: 3.0, HEARTBEAT: 6.0, ROUTE: 2.0}
    master, slave, other = fleet.broker(0), fleet.broker(1), fleet.broker(2)
    assert master.name == slave.name and (master.broker_id, slave.broker_id) == (0, 1)
    assert master.cluster != other.cluster and len({master.address, slave.address, other.address}) == 3
    body = register_body(fleet, master.cluster, DataVersion(1, 5, 0))
    decoded = RegisterBrokerBody.decode(body)
    assert decoded.wrapper.data_version == DataVersion(1, 5, 0)
    assert sorted(decoded.wrapper.topic_config_table) == sorted(fleet.cluster_topics(master.cluster))
    assert {c.read_queue_nums for c in decoded.wrapper.topic_config_table.values()} == {4}
    register = RemotingCommand.decode(register_template(fleet, slave, body).render(7)[4:])
    assert register.ext_fields["brokerId"] == "1" and register.ext_fields["bodyCrc32"] != "0"
    assert RemotingCommand.decode(heartbeat_template(fleet, master).render(1)[4:]).code == HEARTBEAT
    assert RemotingCommand.decode(route_template(fleet, "x").render(1)[4:]).ext_fields == {"topic": "x"}
    assert len(fleet.all_topics()) == 6


@pytest.mark.parametrize("changes, message", [
    ({"brokers": 0}, "brokers"), ({"clusters": 40}, "clusters"), ({"serialize": "xml"}, "serialize"),
    ({"register_period_s": 0, "route_poll_period_s": 0}, "every request kind is off"),
    ({"register_churn": 1.5}, "register_churn"),
])
def test_bad_fleet_shapes_are_rejected(changes, message):
    with pytest.raises(ValueError, match=message):
        FleetShape(**changes)


def test_a_storm_holding_too_many_registration_bodies_is_refused():
    with pytest.raises(ValueError, match="held in memory"):
        StormSettings(fleet=FleetShape(brokers=20000, topics_per_broker=1000)).validate()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_settings_are_validated_before_any_traffic(tmp_path):
    with pytest.raises(ValueError, match="loopback"):
        run_storm(StormSettings(address="192.0.2.1:9876", runs_dir=tmp_path))
    with pytest.raises(ValueError, match="max-requests"):
        run_storm(StormSettings(address="127.0.0.1:1", fleet=FleetShape(route_clients=1000, route_poll_period_s=0.01),
                                duration_s=60, max_requests=1000, runs_dir=tmp_path))
    with pytest.raises(ConnectionError, match="no NameServer"):
        run_storm(StormSettings(address=f"127.0.0.1:{_free_port()}", runs_dir=tmp_path))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("changes, message", [
    ({"subscribers": -1}, "subscribers must be"),
    ({"subscribers": 10, "subscriber_topics": 201}, r"subscriber topics must be 1\.\.200"),
    ({"subscribers": 2, "subscriber_processes": 3}, "at most the subscribers"),
    ({"flap_period_s": 31}, "at least one broker flaps"),
    ({"flap_period_s": 0.01}, "flap period must be 0"),
    ({"flap_period_s": 1, "mode": "closed"}, "needs --mode open"),
])
def test_push_options_are_validated(changes, message):
    with pytest.raises(ValueError, match=message):
        StormSettings(**changes).validate()
    StormSettings(flap_period_s=1).validate()  # flaps without subscribers, or the reverse, are allowed
    StormSettings(subscribers=5, subscriber_topics=200, subscriber_processes=5).validate()


SMALL_FLEET = FleetShape(brokers=6, topics_per_broker=10, queues_per_topic=4, clusters=2, register_period_s=0.5,
                         heartbeat_period_s=0.5, route_clients=100, route_poll_period_s=0.5, register_churn=0.5)


def _commands(generator: RequestGenerator, templates) -> list[RemotingCommand]:
    """The requests of template ids, as the generator loop writes them."""
    conn = generator.connect(-1)
    generator.schedule(np.zeros(len(templates), dtype=np.int64), np.asarray(templates, dtype=np.int32),
                       np.full(len(templates), conn, dtype=np.int32))
    generator.send_due(0)
    return [RemotingCommand.decode(frame) for frame in FrameDecoder().feed(generator.outgoing(conn))]


def _data_version(command: RemotingCommand) -> DataVersion:
    return RegisterBrokerBody.decode(command.body).wrapper.data_version


def _requests(fleet: FleetShape) -> tuple[WorkerPlan, RequestGenerator, WorkerRequests]:
    plan = WorkerPlan(index=1, workers=2, host="127.0.0.1", port=1, fleet=fleet, mode="open", seed=3)
    generator = RequestGenerator(*generator_layout())
    return plan, generator, WorkerRequests(plan, generator)


@pytest.mark.parametrize("churn", [0.0, 1.0])
def test_worker_requests_take_turns_and_churn_data_versions(churn):
    fleet = FleetShape(brokers=4, topics_per_broker=3, clusters=2, register_churn=churn)
    _, generator, requests = _requests(fleet)
    up = _commands(generator, requests.bring_up())
    assert [command.ext_fields["brokerAddr"] for command in up] == [fleet.broker(1).address, fleet.broker(3).address]
    first = [_data_version(command) for command in up]
    assert first[0] != first[1]  # every broker stamps its own version
    templates, slots, _ = requests.next(REGISTER, 4)
    templates = np.concatenate([templates, requests.next(REGISTER, 2)[0]])  # many at a time or few: the same
    versions = [_data_version(command) for command in _commands(generator, templates)]
    if churn:  # every registration switches its broker to the other version
        for broker in (0, 1):
            other = versions[broker]
            assert other != first[broker] and other.counter == first[broker].counter + 1
            assert versions[broker::2] == [other, first[broker], other]
    else:
        assert versions == first * 3
    assert list(slots) == [0, 1, 0, 1]
    routes = _commands(generator, requests.next(ROUTE, 200)[0])
    assert {command.ext_fields["topic"] for command in routes} == set(fleet.all_topics())


def test_churned_versions_follow_each_broker_in_turn_however_the_turns_are_cut():
    fleet = FleetShape(brokers=6, topics_per_broker=3, clusters=2, register_churn=0.5)
    whole, cut = _requests(fleet)[2], _requests(fleet)[2]
    one_go = whole.next(REGISTER, 60)[0]
    pieces = np.concatenate([cut.next(REGISTER, n)[0] for n in (1, 7, 2, 20, 30)])
    assert list(one_go) != [one_go[0]] * 60 and len(set(one_go)) == 6  # 3 brokers × 2 versions, all used
    versions = {template: n for n, template in enumerate(whole.register.flatten())}
    assert all(versions[t] // 2 == n % 3 for n, t in enumerate(one_go))  # each turn is its broker's
    assert list(pieces) == list(one_go)


def test_a_down_brokers_turns_pass_without_a_request():
    fleet = FleetShape(brokers=4, topics_per_broker=3, clusters=2, heartbeat_period_s=1)
    plan, _, requests = _requests(fleet)
    assert list(requests.next(HEARTBEAT, 4)[1]) == [0, 1, 0, 1]  # slots: fleet brokers 1 and 3
    requests.down.add(plan.slot_of(3))
    templates, slots, up = requests.next(REGISTER, 4)
    assert list(slots) == [0, 0] and list(up) == [True, False, True, False] and requests.skipped == 2
    assert list(requests.next(ROUTE, 3)[1]) == [-1, -1, -1] and requests.next(ROUTE, 3)[2] is None  # clients ask anyway


def test_open_loop_storm_against_a_real_server(namesrv_factory, tmp_path):
    server = namesrv_factory(serverSelectorThreads=2, defaultThreadPoolNums=5)
    result = run_storm(StormSettings(address=server.address, fleet=SMALL_FLEET, duration_s=2, warmup_s=1, drain_s=3,
                                     workers=2, connections=2, runs_dir=tmp_path, run_id="open", progress=False))
    run_dir = result.run_dir
    assert run_dir == tmp_path / "open"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["mode"] == "open" and meta["load"]["latency_from"] == "intended send time"
    assert meta["server"]["pid"] == server.pid and meta["server"]["version"] == "V5_3_3"
    assert meta["server"]["thread_config"]["serverSelectorThreads"] == "2"
    assert meta["server"]["thread_config"]["defaultThreadPoolNums"] == "5"
    assert meta["fleet"]["brokers"] == 6 and meta["load"]["bring_up_responses"] == {"SUCCESS": 6}

    # The open loop never skips a send: every scheduled request of the measured 2 s was sent and answered.
    responses = pq.read_table(run_dir / "responses.parquet").to_pylist()
    assert {row["response_code"] for row in responses} == {0}
    per_code = {code: sum(r["count"] for r in responses if r["request_code"] == code) for code in (REGISTER, HEARTBEAT,
                                                                                                   ROUTE)}
    for code, rate in SMALL_FLEET.rates().items():  # each worker's stream may gain or lose one at the edges
        assert abs(per_code[code] - rate * 2) <= 2, (code, per_code)
    sent = sum(done["sent"] for done in meta["load"]["workers_done"])  # warm-up + measured, up to the end
    assert abs(sent - sum(SMALL_FLEET.rates().values()) * 3) <= 3 * 2
    summary = {row["request"]: row for row in result.summary}
    assert summary["GET_ROUTEINFO_BY_TOPIC"]["answered"] == per_code[ROUTE]
    assert summary["ALL"]["errors"] == 0

    reader = HistogramLogReader(str(run_dir / "hdr" / "latency.hlog"), new_histogram())
    logged = 0
    while (interval := reader.get_next_interval_histogram()) is not None:
        logged += interval.get_total_count()
    assert logged == sum(per_code.values())

    assert meta["server_metrics"] == {"url": None, "metrics-start.prom": None, "metrics-end.prom": None}
    resources = pq.read_table(run_dir / "resources.parquet").to_pylist()
    server_rows = [r for r in resources if r["process"] == "server"]
    assert server_rows and all(r["rss_bytes"] > 0 and r["threads"] > 1 for r in server_rows)
    assert {r["process"] for r in resources} == {"server", "generator"}
    assert all(r["t"] >= 0.5 for r in resources)


def test_closed_loop_storm_keeps_requests_in_flight(namesrv_factory, tmp_path):
    server = namesrv_factory()
    result = run_storm(StormSettings(address=server.address, fleet=SMALL_FLEET, mode="closed", duration_s=1,
                                     warmup_s=0.5, drain_s=3, workers=1, connections=2, in_flight=4,
                                     runs_dir=tmp_path, progress=False))
    meta = json.loads((result.run_dir / "meta.json").read_text())
    assert meta["mode"] == "closed" and meta["load"]["in_flight_per_connection"] == 4
    assert meta["load"]["latency_from"] == "send time"
    summary = {row["request"]: row for row in result.summary}
    assert summary["ALL"]["errors"] == 0
    # far more than an open loop at the fleet's 224 req/s would send: the loop is closed, not paced
    assert summary["ALL"]["answered"] > 500
    assert summary["GET_ROUTEINFO_BY_TOPIC"]["answered"] > summary["REGISTER_BROKER"]["answered"] * 5


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable CPU: there is nothing to pin apart")
def test_a_pinned_storm_gives_its_caller_back_every_cpu_it_had(namesrv_factory, tmp_path):
    """The coordinator runs on the generator's CPUs only during the run: a knee's next step, or the
    test after this one, is not left on half of the host."""
    before = os.sched_getaffinity(0)
    server = namesrv_factory()
    result = run_storm(StormSettings(address=server.address, fleet=SMALL_FLEET, mode="closed", duration_s=0.5,
                                     warmup_s=0.3, drain_s=2, workers=1, connections=1, in_flight=2,
                                     runs_dir=tmp_path, progress=False, cores=core_plan("auto")))
    meta = json.loads((result.run_dir / "meta.json").read_text())
    assert meta["generator"]["cores"]["generator_cpus"] != sorted(before)  # it was pinned while it ran
    assert os.sched_getaffinity(0) == before


def test_cli_launches_a_fresh_server_and_keeps_its_log(tmp_path):
    command = [sys.executable, str(ROOT / "bench" / "heartbeat_storm.py"), "--launch", "--server-set",
               "clientRequestThreadPoolNums=3", "--duration", "1", "--warmup", "0.5", "--drain", "2", "--workers", "1",
               "--brokers", "4", "--topics", "5", "--register-period", "1", "--route-clients", "50",
               "--route-poll-period", "1", "--runs-dir", str(tmp_path), "--run-id", "cli", "--no-progress"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "GET_ROUTEINFO_BY_TOPIC" in result.stdout and f"run directory: {tmp_path / 'cli'}" in result.stdout
    meta = json.loads((tmp_path / "cli" / "meta.json").read_text())
    assert meta["launched"] == {"overrides": {"clientRequestThreadPoolNums": "3"}}
    assert meta["server"]["thread_config"]["clientRequestThreadPoolNums"] == "3"
    assert "boot success" in (tmp_path / "cli" / "server.log").read_text()
    # the launched server's /metrics as the measured window starts (the fleet registered) and near its end
    assert meta["server_metrics"]["metrics-start.prom"] == "metrics-start.prom"
    start = (tmp_path / "cli" / "metrics-start.prom").read_text()
    end = (tmp_path / "cli" / "metrics-end.prom").read_text()
    assert "\nnamesrv_brokers 4.0\n" in start and "\nnamesrv_brokers 4.0\n" in end
    routes = 'namesrv_request_duration_seconds_count{request="GET_ROUTEINFO_BY_TOPIC"} '
    counted = [float(text.split(routes)[1].split()[0]) for text in (start, end)]
    assert counted[1] > counted[0] > 0  # the bring-up's queries, then the window's


def test_cli_reports_bad_input_clearly(tmp_path):
    command = [sys.executable, str(ROOT / "bench" / "heartbeat_storm.py"), "--address", "192.0.2.1:9876",
               "--runs-dir", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2 and "not a loopback address" in result.stderr


def test_flapping_brokers_reach_subscribers_and_their_propagation_is_recorded(tmp_path):
    """4 brokers (2 clusters of one master + one slave), 5 topics each; 20 subscribers of 3 topics;
    a flap every 0.5 s of 2.5 s: 5 flaps, 10 changes, each seen by every subscriber of its cluster's topics."""
    fleet = FleetShape(brokers=4, topics_per_broker=5, queues_per_topic=4, clusters=2, register_period_s=1,
                       heartbeat_period_s=1, route_clients=20, route_poll_period_s=1)
    command = [sys.executable, str(ROOT / "bench" / "heartbeat_storm.py"), "--launch", "--duration", "2.5",
               "--warmup", "0.5", "--drain", "2", "--workers", "2", "--brokers", "4", "--topics", "5", "--queues", "4",
               "--register-period", "1", "--heartbeat-period", "1", "--route-clients", "20", "--route-poll-period",
               "1", "--subscribers", "20", "--subscriber-topics", "3", "--subscriber-processes", "2",
               "--flap-period", "0.5", "--runs-dir", str(tmp_path), "--run-id", "push", "--no-progress"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "push"
    meta = json.loads((run_dir / "meta.json").read_text())
    propagation = meta["propagation"]
    pairs = Counter(FleetShape.cluster_of(topic) for mine in choose_topics(fleet, 20, 3, seed=1) for topic in mine)
    expected = 2 * sum(pairs[fleet.broker(flap % 4).cluster] for flap in range(5))  # each flap: close + register
    assert (propagation["flaps"], propagation["changes"], propagation["sightings_expected"]) == (5, 10, expected)
    assert propagation["count"] == expected > 0
    assert 0 < propagation["p50_ms"] <= propagation["p99_ms"] <= propagation["max_ms"] < 2000
    assert (propagation["versions_missed"], propagation["subscribers_dropped"]) == (0, 0)
    assert propagation["subscription_responses"] == {"SUCCESS": 20}
    assert sum(done["flaps"] for done in meta["load"]["workers_done"]) == 5
    assert {row["request"]: row for row in meta["summary"]}["ALL"]["errors"] == 0  # no request lost to a flap
    assert f"route-change propagation to 20 subscribers, 10 changes: {expected} of {expected}" in result.stdout
    assert f"p99 {propagation['p99_ms']:.3f} ms" in result.stdout and "versions missed 0" in result.stdout

    rows = [r for r in pq.read_table(run_dir / "histograms.parquet").to_pylist() if r["metric"] == "propagation"]
    assert {(r["request_code"], r["request"]) for r in rows} == {(int(RequestCode.ROUTE_CHANGED), "ROUTE_CHANGED")}
    assert sum(r["count"] for r in rows) == expected and {r["interval_start"] for r in rows} <= {0.0, 1.0, 2.0}
    reader = HistogramLogReader(str(run_dir / "hdr" / "propagation.hlog"), new_histogram())
    logged = new_histogram()
    while (interval := reader.get_next_interval_histogram()) is not None:
        assert interval.get_tag() == "ROUTE_CHANGED"
        logged.add(interval)
    assert logged.get_total_count() == expected
    assert logged.get_value_at_percentile(99) / 1000 == propagation["p99_ms"]
    resources = pq.read_table(run_dir / "resources.parquet").to_pylist()
    assert {r["process"] for r in resources} == {"server", "generator", "subscribers"}


def _exit_with_sigint_disposition() -> None:
    sys.exit(3 if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else 4)


def test_storm_processes_ignore_sigint_from_their_first_instruction():
    """Nothing in the child's target sets SIG_IGN: it is inherited from the start; the starting
    process has its own handler back afterwards."""
    child = multiprocessing.get_context("spawn").Process(target=_exit_with_sigint_disposition)
    handler = signal.getsignal(signal.SIGINT)
    start_shielded_from_sigint([child])
    child.join(timeout=60)
    assert child.exitcode == 3
    assert signal.getsignal(signal.SIGINT) is handler


def _start_storm_for_ctrl_c(tmp_path: Path) -> subprocess.Popen:
    """A launched 60 s storm in its own process group with the default Ctrl-C handling, as from a terminal."""
    command = [sys.executable, str(ROOT / "bench" / "heartbeat_storm.py"), "--launch", "--duration", "60",
               "--warmup", "0.5", "--drain", "2", "--workers", "1", "--brokers", "4", "--topics", "5",
               "--register-period", "1", "--route-clients", "200", "--route-poll-period", "1",
               "--runs-dir", str(tmp_path), "--run-id", "cut", "--no-progress"]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))


def _kill_storm(storm: subprocess.Popen) -> None:
    """A storm still running when its test gives up, killed with everything it started: the server it
    launched runs in a session of its own, which the storm's SIGKILL would leave behind."""
    if storm.poll() is not None:
        return
    try:
        started = psutil.Process(storm.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    storm.kill()
    for process in started:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    storm.wait()


def _storm_workers(storm: subprocess.Popen) -> list[psutil.Process]:
    return [child for child in psutil.Process(storm.pid).children()
            if "spawn_main" in " ".join(child.cmdline()) and "storm" not in child.name()]


def _ignores_sigint(pid: int) -> bool:
    """Whether process `pid` ignores SIGINT now (the SigIgn mask of /proc/PID/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(ignored & (1 << (signal.SIGINT - 1)))


def _wait_for(storm: subprocess.Popen, condition, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline and storm.poll() is None, f"the storm never got to {what}"
        time.sleep(0.02)


def _connected(worker: psutil.Process) -> bool:
    try:
        return any(c.status == psutil.CONN_ESTABLISHED for c in worker.net_connections(kind="tcp"))
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(120)
def test_ctrl_c_ends_the_storm_gracefully_and_keeps_what_was_measured(tmp_path):
    """SIGINT to the whole process group, as a terminal's Ctrl-C: no traceback, the run is kept and marked partial."""
    storm = _start_storm_for_ctrl_c(tmp_path)
    try:
        _wait_for(storm, lambda: any(_connected(worker) for worker in _storm_workers(storm)), "its fleet's bring-up")
        time.sleep(3)  # bring-up and warm-up done, a few seconds measured
        os.killpg(storm.pid, signal.SIGINT)  # the generator's workers too, and not the launched server
        out, err = storm.communicate(timeout=60)
    finally:
        _kill_storm(storm)
    assert storm.returncode == 130, err
    assert "Traceback" not in err and "interrupted: ending the run now" in err
    assert "partial run (Ctrl-C):" in out and f"run directory: {tmp_path / 'cut'}" in out
    meta = json.loads((tmp_path / "cut" / "meta.json").read_text())
    assert meta["partial"] is True and meta["planned_duration_s"] == 60.0 and 0 < meta["duration_s"] < 30
    routes = {row["request"]: row for row in meta["summary"]}["GET_ROUTEINFO_BY_TOPIC"]
    assert routes["errors"] == 0 and routes["answered"] > 100
    assert routes["throughput_per_s"] == pytest.approx(200, rel=0.2)  # over the measured seconds, not the planned 60
    assert "boot success" in (tmp_path / "cut" / "server.log").read_text()


@pytest.mark.timeout(120)
def test_ctrl_c_while_the_workers_start_ends_the_storm_at_once_without_a_traceback(tmp_path):
    """Ctrl-C as soon as a worker process exists, while it is still importing: the storm workers were
    started with SIGINT ignored, so none prints a traceback; the coordinator says nothing was measured
    and ends its workers rather than waiting for them. (The coordinator itself ignores SIGINT for the
    few milliseconds of the starts, bench.storm.worker.start_shielded_from_sigint, and a Ctrl-C then
    is dropped: sent in that window, the storm ran its full 60 s, 1 run in 12 here.)"""
    storm = _start_storm_for_ctrl_c(tmp_path)
    try:
        _wait_for(storm, lambda: _storm_workers(storm) and not _ignores_sigint(storm.pid), "starting its workers")
        interrupted = time.monotonic()
        os.killpg(storm.pid, signal.SIGINT)
        out, err = storm.communicate(timeout=60)
        ended_after_s = time.monotonic() - interrupted
    finally:
        _kill_storm(storm)
    assert storm.returncode == 130, err
    assert "Traceback" not in err, err
    assert "heartbeat_storm: interrupted during bring-up, before the measured window: nothing was measured" in err
    assert "run directory" not in out and not (tmp_path / "cut").exists()
    assert ended_after_s < 8, "the coordinator waited for workers of an abandoned run"


def test_a_kind_sent_but_never_answered_is_summarized_as_all_errors():
    """Every connection closed by an overloaded server: the window's requests count, as NO_RESPONSE."""
    from bench.heartbeat_storm import format_summary, summarize
    from bench.lib.output import NO_RESPONSE, RunRecorder

    run = RunRecorder("lost")
    run.add_responses(0, ROUTE, NO_RESPONSE, 500)
    run.add_responses(1, ROUTE, NO_RESPONSE, 300)
    rows = summarize(run, 2.0)
    assert rows == [{"request": "GET_ROUTEINFO_BY_TOPIC", "requests": 800, "answered": 0, "throughput_per_s": 0.0,
                     "p50_ms": None, "p99_ms": None, "p99_9_ms": None, "max_ms": None, "errors": 800,
                     "send_delay_p99_ms": 0.0, "send_delay_p99_9_ms": 0.0}]
    assert format_summary(rows).splitlines()[1].split() == ["GET_ROUTEINFO_BY_TOPIC", "0", "0", "–", "–", "–", "–",
                                                            "800"]


def test_each_kinds_row_has_the_generators_own_send_delay_at_p99_and_p99_9():
    """The tail's split: a latency p99.9 near the send delay's p99.9 is the generator's lateness, not the server's."""
    from bench.heartbeat_storm import summarize
    from bench.lib.hdr import record_us
    from bench.lib.output import RunRecorder

    run = RunRecorder("late")
    latency, delay = new_histogram(), new_histogram()
    for i in range(1000):
        record_us(latency, 500 if i < 990 else 4000)
        record_us(delay, 50 if i < 998 else 3000)  # two sends in a thousand 3 ms late
    run.add_histogram("latency", 0, ROUTE, latency)
    run.add_histogram("send_delay", 0, ROUTE, delay)
    run.add_responses(0, ROUTE, 0, 1000)
    [row] = summarize(run, 1.0)
    assert row["p99_ms"] == pytest.approx(0.5, rel=0.01) and row["p99_9_ms"] == pytest.approx(4.0, rel=0.01)
    assert row["send_delay_p99_ms"] == pytest.approx(0.05, rel=0.01)
    assert row["send_delay_p99_9_ms"] == pytest.approx(3.0, rel=0.01)
