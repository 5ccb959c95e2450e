"""The JSON header codec (serializeType 0), as fastjson writes and tolerates it (reference 1.2)."""
from __future__ import annotations

import orjson

from namesrv.protocol.codes import LanguageCode
from namesrv.errors import ProtocolError
from namesrv.protocol.jsonbody import as_int

_LANGUAGE_BY_NAME = {member.name: int(member) for member in LanguageCode}
_LANGUAGE_NAMES = {int(member): member.name for member in LanguageCode}

HeaderTuple = tuple[int, int, int, int, int, "str | None", "dict[str, str] | None"]


def _int_field(header: dict, name: str) -> int:
    value = header.get(name)
    if value is None:
        return 0
    number = as_int(value, 32)  # fastjson also coerces a decimal string
    if number is None:
        raise ProtocolError(f"JSON header field {name!r} must be a 32-bit integer, got {value!r:.60}")
    return number


def _ext_value(key: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    raise ProtocolError(f"JSON header extFields[{key!r}] must be a string, got {type(value).__name__}")


def decode_json_header(data: bytes) -> HeaderTuple:
    """Decode a JSON header into (code, language, version, opaque, flag, remark, extFields).

    Lenient where fastjson is (unknown fields, numbers in extFields, any language, missing
    extFields); strict about what would make the command meaningless (not an object, a
    non-integer code/opaque/flag/version, invalid UTF-8).
    """
    try:
        header = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"JSON header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"JSON header must be an object, got {type(header).__name__}")
    language = header.get("language")
    if isinstance(language, str):
        language = _LANGUAGE_BY_NAME.get(language, LanguageCode.OTHER)
    elif isinstance(language, int) and not isinstance(language, bool) and language in _LANGUAGE_NAMES:
        pass
    else:  # unknown or absent: fastjson leaves null, which is harmless
        language = LanguageCode.OTHER
    remark = header.get("remark")
    if remark is not None and not isinstance(remark, str):
        if isinstance(remark, (int, float)) and not isinstance(remark, bool):
            remark = str(remark)
        else:
            raise ProtocolError(f"JSON header field 'remark' must be a string, got {type(remark).__name__}")
    raw_ext = header.get("extFields")
    ext: dict[str, str] | None
    if raw_ext is None:
        ext = None
    elif isinstance(raw_ext, dict):
        ext = {}
        for key, value in raw_ext.items():
            value = _ext_value(key, value)
            if value is not None:
                ext[key] = value
    else:
        raise ProtocolError(f"JSON header field 'extFields' must be an object, got {type(raw_ext).__name__}")
    return (
        _int_field(header, "code"),
        int(language),
        _int_field(header, "version"),
        _int_field(header, "opaque"),
        _int_field(header, "flag"),
        remark,
        ext,
    )


def encode_json_header(
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext_fields: dict[str, str] | None,
) -> bytes:
    """Encode a JSON header with Java's field order; null remark and extFields are omitted."""
    header: dict[str, object] = {"code": code}
    if ext_fields is not None:
        header["extFields"] = ext_fields
    header["flag"] = flag
    header["language"] = _LANGUAGE_NAMES.get(language, "OTHER")
    header["opaque"] = opaque
    if remark is not None:
        header["remark"] = remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = version
    return orjson.dumps(header)
