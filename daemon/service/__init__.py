"""The gRPC transport: server, guards, auth, TLS, limits, metrics, trace, config, assembly."""
