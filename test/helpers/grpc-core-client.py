"""A gRPC client on gRPC C-core (Debian's python3-grpcio), for interop tests of the sidecar's
own HTTP/2 and gRPC layers against an implementation that shares no code with Node's.

Reads one JSON object on stdin:
  {"target": "127.0.0.1:port",
   "tls": null | {"root_pem": "...", "server_name": "localhost"},
   "calls": [{"kind": "unary" | "first-of-stream", "method": "/pkg.Service/Method",
              "request": "<base64>", "repeat": 1, "timeout": 10 (null: no deadline),
              "metadata": [["key", "value"], ...]}]}
Writes {"results": [[{"code": 0, "details": "", "response": "<base64>"}, ...], ...]}: one list
per call, one entry per repeat. Repeats are sent at once, multiplexed on the one channel.
Messages are bytes both ways (no serializers): the test encodes and decodes them.
"""

import base64
import json
import sys

import grpc


def open_channel(spec):
    tls = spec.get("tls")
    if tls is None:
        return grpc.insecure_channel(spec["target"])
    credentials = grpc.ssl_channel_credentials(root_certificates=tls["root_pem"].encode())
    options = [("grpc.ssl_target_name_override", tls["server_name"])]
    return grpc.secure_channel(spec["target"], credentials, options=options)


def failure(error):
    return {"code": error.code().value[0], "details": error.details() or ""}


def success(message):
    return {"code": 0, "details": "", "response": base64.b64encode(message).decode()}


def unary(channel, call, request, metadata):
    stub = channel.unary_unary(call["method"])
    timeout = call.get("timeout", 10)
    futures = [
        stub.future(request, timeout=timeout, metadata=metadata) for _ in range(call.get("repeat", 1))
    ]
    results = []
    for future in futures:
        try:
            results.append(success(future.result()))
        except grpc.RpcError as error:
            results.append(failure(error))
    return results


def first_of_stream(channel, call, request, metadata):
    stream = channel.unary_stream(call["method"])(request, timeout=call.get("timeout", 10), metadata=metadata)
    try:
        first = next(stream)
    except grpc.RpcError as error:
        return [failure(error)]
    stream.cancel()
    return [success(first)]


def main():
    spec = json.load(sys.stdin)
    channel = open_channel(spec)
    grpc.channel_ready_future(channel).result(timeout=10)
    results = []
    for call in spec["calls"]:
        request = base64.b64decode(call["request"])
        metadata = [tuple(pair) for pair in call.get("metadata", [])]
        run = unary if call["kind"] == "unary" else first_of_stream
        results.append(run(channel, call, request, metadata))
    channel.close()
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()
