"""The farm server: serves any environment as a ``farm.v1.Environment`` gRPC endpoint."""

from farm.server.app import BackgroundServer, Server, ServerConfig, serve_until_signal

__all__ = ["BackgroundServer", "Server", "ServerConfig", "serve_until_signal"]
