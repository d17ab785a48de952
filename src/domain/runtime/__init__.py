"""The node Runtime contract in domain terms: value types, errors, feature/version policy, allocation records,
env-var limits, health tracking and the exporter data assembly. The wire form lives in
``proto/ljrk/runtime/v1/runtime.proto`` and ``adapters.grpc``; nothing here knows about it."""
