"""The heartbeat storm's engine: worker processes over the generator loop, route-change subscribers, flaps, recording."""
