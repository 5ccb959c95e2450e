"""Harness: binary header decode/encode, RemotingCommand.decode and the ZeroMQ msgpack command
codec; every decoded command is re-encoded in both header codecs and read back.

Run by `make fuzz`, or by hand: `python -m fuzz.fuzz_commands -max_total_time=30 fuzz/corpus/commands`.
"""
from fuzz.harness import main

#: Selector byte order: append only, or saved crash inputs change meaning.
TARGETS = ("binary_header", "encode_header", "command", "msgpack")

if __name__ == "__main__":
    main(TARGETS)
