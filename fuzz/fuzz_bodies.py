"""Harness: every body decoder; whatever one accepts must re-encode and read back the same.

Run by `make fuzz`, or by hand: `python -m fuzz.fuzz_bodies -max_total_time=30 fuzz/corpus/bodies`.
"""
from fuzz.harness import main

#: Selector byte order: append only, or saved crash inputs change meaning.
TARGETS = ("DataVersion", "TopicRouteData", "ClusterInfo", "TopicList", "KVTable", "BrokerMemberGroup",
           "RegisterBrokerBody-json", "RegisterBrokerBody-old", "RegisterBrokerBody-compressed",
           "RegisterBrokerBody-layout", "RegisterBrokerBody-layout-4.9.8", "TopicConfig-text")

if __name__ == "__main__":
    main(TARGETS)
