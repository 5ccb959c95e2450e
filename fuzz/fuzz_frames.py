"""Harness: split_frames with varying max_frame_length, and FrameDecoder fed in random chunkings.

Run by `make fuzz`, or by hand: `python -m fuzz.fuzz_frames -max_total_time=30 fuzz/corpus/frames`.
"""
from fuzz.harness import main

#: Selector byte order: append only, or saved crash inputs change meaning.
TARGETS = ("split_frames", "frame_decoder")

if __name__ == "__main__":
    main(TARGETS)
