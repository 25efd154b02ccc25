"""The dm_env_rpc reference stack for the step-latency benchmark.

A minimal ``dm_env_rpc.v1`` EnvironmentServicer, written after the package's
``examples/catch_environment.py``: one synchronous ``Process`` stream per
connection on a thread-pool ``grpc.server``, messages (un)packed with the
package's own ``spec_manager`` / ``tensor_utils``. It serves the *same* env
classes that farm serves, so only the transport differs:

* ``--obs small``: ``toy/latency`` with ``dist="none"`` (a 4-float32 observation);
* ``--obs image``: ``toy/pixels`` (a 720x1280x3 uint8 frame, a fresh copy per step).

Observations: uid 1 ``observation`` and uid 2 ``reward`` (float64 scalar).
Action: uid 1 ``action`` (int64 scalar in ``[0, n)``). After a ``reset`` (or the
end of an episode) the next step returns the first observation without
stepping, as in the catch example, which is what ``DmEnvAdaptor`` expects.

Run: ``python bench/dm_env_rpc_reference.py --address 127.0.0.1:0 --obs small``
(``--address unix:///tmp/x.sock`` also works). The bound address is printed and,
with ``--ready-file``, written to that file once serving. SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from concurrent import futures
from typing import Any

import grpc
import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2, dm_env_rpc_pb2_grpc, spec_manager, tensor_utils
from google.rpc import status_pb2

WORLD_NAME = "bench"
OBS_UID, REWARD_UID, ACTION_UID = 1, 2, 1
# Long enough that a benchmark never sees an episode end (so no reset is timed).
EPISODE_LENGTH = 1_000_000_000


def make_env(kind: str) -> Any:
    """The gymnasium env farm serves for the same benchmark row."""
    if kind == "small":
        from env_adapters.toy.latency import LatencyEnv

        return LatencyEnv(dist="none", episode_length=EPISODE_LENGTH)
    if kind == "image":
        from env_adapters.toy.pixels import PixelsEnv

        return PixelsEnv(episode_length=EPISODE_LENGTH)
    raise ValueError(f"unknown observation kind {kind!r} (small | image)")


def _specs(env: Any) -> tuple[dict[int, Any], dict[int, Any]]:
    box = env.observation_space
    observations = {
        OBS_UID: dm_env_rpc_pb2.TensorSpec(
            name="observation",
            shape=list(box.shape),
            dtype=tensor_utils.np_type_to_data_type(box.dtype),
        ),
        REWARD_UID: dm_env_rpc_pb2.TensorSpec(name="reward", dtype=dm_env_rpc_pb2.DOUBLE),
    }
    action = dm_env_rpc_pb2.TensorSpec(name="action", dtype=dm_env_rpc_pb2.INT64)
    action.min.int64s.array.append(int(env.action_space.start))
    action.max.int64s.array.append(int(env.action_space.start + env.action_space.n - 1))
    return {ACTION_UID: action}, observations


class GymEnvironmentService(dm_env_rpc_pb2_grpc.EnvironmentServicer):
    """One gymnasium env per world; one world per ``Process`` stream."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def Process(self, request_iterator: Any, context: Any) -> Any:
        env: Any = None
        joined = False
        first_frame = True  # next step returns the current observation, no transition
        obs: Any = None
        action_specs: dict[int, Any] = {}
        observation_specs: dict[int, Any] = {}
        action_manager: spec_manager.SpecManager | None = None

        for request in request_iterator:
            environment_response = dm_env_rpc_pb2.EnvironmentResponse()
            try:
                message_type = request.WhichOneof("payload")
                internal_request = getattr(request, message_type)
                if message_type == "create_world":
                    if env is not None:
                        raise RuntimeError("this server supports one world per connection")
                    env = make_env(self.kind)
                    action_specs, observation_specs = _specs(env)
                    action_manager = spec_manager.SpecManager(action_specs)
                    obs, _ = env.reset(seed=0)
                    first_frame = True
                    environment_response.create_world.world_name = WORLD_NAME
                elif message_type == "join_world":
                    if env is None or internal_request.world_name != WORLD_NAME:
                        raise RuntimeError(f"no world named {internal_request.world_name!r}")
                    specs = environment_response.join_world.specs
                    for uid, spec in action_specs.items():
                        specs.actions[uid].CopyFrom(spec)
                    for uid, spec in observation_specs.items():
                        specs.observations[uid].CopyFrom(spec)
                    joined = True
                elif message_type == "step":
                    if not joined:
                        raise RuntimeError("step before join_world")
                    reward = 0.0
                    state = dm_env_rpc_pb2.EnvironmentStateType.RUNNING
                    if first_frame:
                        first_frame = False
                    else:
                        assert action_manager is not None
                        action = action_manager.unpack(internal_request.actions)["action"]
                        obs, reward, terminated, truncated, _ = env.step(int(action))
                        if terminated or truncated:
                            state = (
                                dm_env_rpc_pb2.EnvironmentStateType.TERMINATED
                                if terminated
                                else dm_env_rpc_pb2.EnvironmentStateType.INTERRUPTED
                            )
                    step = environment_response.step
                    for uid in internal_request.requested_observations:
                        if uid == OBS_UID:
                            tensor = tensor_utils.pack_tensor(np.asarray(obs))
                        elif uid == REWARD_UID:
                            tensor = tensor_utils.pack_tensor(
                                float(reward), dtype=dm_env_rpc_pb2.DOUBLE
                            )
                        else:
                            raise RuntimeError(f"unknown observation uid {uid}")
                        step.observations[uid].CopyFrom(tensor)
                    step.state = state
                    if state != dm_env_rpc_pb2.EnvironmentStateType.RUNNING:
                        obs, _ = env.reset()
                        first_frame = True
                elif message_type == "reset":
                    if not joined:
                        raise RuntimeError("reset before join_world")
                    obs, _ = env.reset()
                    first_frame = True
                    specs = environment_response.reset.specs
                    for uid, spec in action_specs.items():
                        specs.actions[uid].CopyFrom(spec)
                    for uid, spec in observation_specs.items():
                        specs.observations[uid].CopyFrom(spec)
                elif message_type == "reset_world":
                    if env is None:
                        raise RuntimeError("no world to reset")
                    obs, _ = env.reset()
                    first_frame = True
                    environment_response.reset_world.SetInParent()
                elif message_type == "leave_world":
                    joined = False
                    environment_response.leave_world.SetInParent()
                elif message_type == "destroy_world":
                    if joined:
                        raise RuntimeError("cannot destroy the world while joined")
                    if env is not None:
                        env.close()
                    env = None
                    environment_response.destroy_world.SetInParent()
                else:
                    raise RuntimeError(f"unhandled message: {message_type}")
            except Exception as e:  # noqa: BLE001 - reported to the client, as in the example
                environment_response.Clear()
                environment_response.error.CopyFrom(status_pb2.Status(message=str(e)))
            yield environment_response
        if env is not None:
            env.close()


def serve(address: str, kind: str, ready_file: str | None) -> int:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
            ("grpc.so_reuseport", 0),
        ],
    )
    dm_env_rpc_pb2_grpc.add_EnvironmentServicer_to_server(GymEnvironmentService(kind), server)
    port = server.add_insecure_port(address)
    if not address.startswith("unix:"):
        if port == 0:
            print(f"cannot listen on {address}", file=sys.stderr)
            return 1
        address = f"{address.rsplit(':', 1)[0]}:{port}"
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"dm_env_rpc reference ({kind}) serving at {address}", flush=True)
    if ready_file:
        with open(ready_file + ".tmp", "w") as f:
            f.write(address)
        os.replace(ready_file + ".tmp", ready_file)
    while not stop.wait(0.5):
        pass
    server.stop(1.0).wait(5.0)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", default="127.0.0.1:0", help="HOST:PORT or unix:///path")
    p.add_argument("--obs", choices=["small", "image"], default="small")
    p.add_argument("--ready-file", help="write the bound address here once serving")
    args = p.parse_args(argv)
    return serve(args.address, args.obs, args.ready_file)


if __name__ == "__main__":
    sys.exit(main())
