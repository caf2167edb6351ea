"""/healthz's check of the DRA socket (driver/plugin/health/endpoint.py, check_dra_socket), what the
DaemonSet's liveness probe acts on: healthy when the socket answers an empty NodePrepareResources, else a
reason naming the socket and the gRPC status (no socket, a service that fails), never an exception."""

from __future__ import annotations

from concurrent import futures

import grpc

from api.grpc import dra_v1_pb2, dra_v1_pb2_grpc
from driver.plugin.health.endpoint import check_dra_socket


class Answering(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, fail: bool = False):
        self.fail = fail

    def NodePrepareResources(self, request, context):
        if self.fail:
            context.abort(grpc.StatusCode.INTERNAL, "preparer stuck")
        return dra_v1_pb2.NodePrepareResourcesResponse()


def _serve(path, fail=False):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(Answering(fail), server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server


def test_a_socket_that_answers_is_healthy(tmp_path):
    server = _serve(tmp_path / "dra.sock")
    try:
        assert check_dra_socket(str(tmp_path / "dra.sock"), timeout_s=30) == ""
    finally:
        server.stop(0)


def test_a_service_that_fails_is_unhealthy_naming_the_status(tmp_path):
    server = _serve(tmp_path / "dra.sock", fail=True)
    try:
        assert check_dra_socket(str(tmp_path / "dra.sock"), timeout_s=30) == (
            f"dra socket {tmp_path / 'dra.sock'}: INTERNAL: preparer stuck"
        )
    finally:
        server.stop(0)


def test_no_socket_is_unhealthy_naming_it(tmp_path):
    problem = check_dra_socket(str(tmp_path / "absent.sock"), timeout_s=5)
    assert problem.startswith(f"dra socket {tmp_path / 'absent.sock'}: UNAVAILABLE: ")
