"""The RocketMQ remoting protocol, sans-IO: commands, header and frame codecs, body models."""
from namesrv.protocol.codes import (
    DEFAULT_MAX_FRAME_LENGTH,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERVER_VERSION,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
    Version,
)
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.protocol.frame import FrameDecoder, encode_frames
from namesrv.protocol.route import (
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    KVTable,
    QueueData,
    RegisterBrokerResult,
    TopicList,
    TopicRouteData,
)
from namesrv.protocol.topic import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper

__all__ = [
    "DEFAULT_MAX_FRAME_LENGTH", "FLAG_ONEWAY", "FLAG_RESPONSE", "SERVER_VERSION", "BrokerData", "BrokerMemberGroup",
    "ClusterInfo", "DataVersion", "FrameDecoder", "KVTable", "LanguageCode", "ProtocolError", "QueueData",
    "RegisterBrokerBody", "RegisterBrokerResult", "RemotingCommand", "RequestCode", "ResponseCode", "SerializeType",
    "TopicConfig", "TopicConfigSerializeWrapper", "TopicList", "TopicRouteData", "Version", "encode_frames",
]
