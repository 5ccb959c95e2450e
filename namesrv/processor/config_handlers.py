"""GET_NAMESRV_CONFIG and UPDATE_NAMESRV_CONFIG.

UPDATE_NAMESRV_CONFIG is an unauthenticated remote write: RocketMQ's CVE-2023-33246 and
CVE-2023-37582 both came from it (command execution via rocketmqHome-style keys, arbitrary file
write via configStorePath). Here it can only ever change the keys of an explicit allowlist
(`NamesrvConfig.remote_updatable()`: feature switches, never a path, port or pool); anything else
is refused before anything is applied or written. The security keys (adminAllowedNetworks,
adminToken, maxTopicsPerRegistration) are locked: black-listed whatever configBlackList says.
"""
from __future__ import annotations

import copy
import difflib
import logging
from pathlib import Path

from namesrv.channel import Channel
from namesrv.config import ConfigError, NamesrvConfig, parse_properties, update_properties
from namesrv.files import write_atomically
from namesrv.processor.context import Change, HandlerContext, Hints, Refusal, WriteHandler
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand

log = logging.getLogger(__name__)


def get_namesrv_config(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    """Every key, sorted; secrets (adminToken) redacted: this is not an admin request."""
    return request.make_response(ResponseCode.SUCCESS, body=ctx.config.to_text().encode("utf-8"))


def _prepare_config_update(ctx: HandlerContext, request: RemotingCommand, channel: Channel,
                           hints: Hints) -> Change | RemotingCommand:
    """Every key checked against the black list and the allowlist before anything is applied."""
    if request.body is None:
        return request.make_response(ResponseCode.SUCCESS)
    try:
        properties = parse_properties(request.body.decode("utf-8"))
    except UnicodeDecodeError:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "string2Properties error")
    black_listed = ctx.config.black_list()
    if any(key in black_listed for key in properties):
        log.warning("UPDATE_NAMESRV_CONFIG from %s refused, black-listed key in %s", channel, sorted(properties))
        return request.make_response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    refusal = _refusal(properties)
    if refusal:
        log.warning("UPDATE_NAMESRV_CONFIG from %s refused: %s", channel, refusal)
        return request.make_response(ResponseCode.NO_PERMISSION, f"Can not update config {refusal}")
    if not properties:
        return request.make_response(ResponseCode.SUCCESS)
    return properties


def _refusal(properties: dict[str, str]) -> str:
    """What refuses keys outside the allowlist, by name: a key that does not exist (with the nearest
    one that does), or one that cannot change at runtime (with those that can); "" if none is."""
    known = NamesrvConfig.keys()
    updatable = NamesrvConfig.remote_updatable()
    reasons = []
    for key in sorted(key for key in properties if key not in known):
        nearest = difflib.get_close_matches(key, known, n=1)
        reasons.append(f"{key}: unknown key" + (f" (did you mean {nearest[0]}?)" if nearest else ""))
    fixed = sorted(key for key in properties if key in known and key not in updatable)
    if fixed:
        reasons.append(f"{', '.join(fixed)}: not updatable at runtime (updatable: {', '.join(sorted(updatable))})")
    return "; ".join(reasons)


def _apply_config_update(ctx: HandlerContext, properties: Change, channel: Channel) -> Refusal | None:
    """Validate every value, write the new config file atomically, then apply it: all or nothing."""
    with ctx.config_lock:
        updated = copy.copy(ctx.config)
        try:
            updated.apply(properties)
        except ConfigError as exc:
            return Refusal(ResponseCode.SYSTEM_ERROR, str(exc))
        if ctx.persist:
            _persist(updated, properties)  # an error refuses the update (RequestProcessor.apply)
        ctx.config.apply(properties)
    where = f"written to {updated.config_store_path}" if ctx.persist else "in memory; the sequencer wrote the file"
    log.warning("namesrv config updated by %s: %s (%s)", channel, properties, where)
    return None


def _persist(updated: NamesrvConfig, properties: dict[str, str]) -> None:
    """Rewrite only the updated keys in the config file, in place (comments, layout and every other
    key as the operator wrote them; command-line overrides never reach it), atomically. RocketMQ
    writes every effective key, command-line ones included, and drops the comments."""
    path = Path(updated.config_store_path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    values = updated.to_properties(reveal_secrets=True)
    write_atomically(path, update_properties(text, {key: values[key] for key in properties}).encode("utf-8"))


update_namesrv_config = WriteHandler(_prepare_config_update, _apply_config_update)
