"""Generated from protos/daemon/v1/daemon.proto by scripts/gen_protos.py. Do not edit."""
