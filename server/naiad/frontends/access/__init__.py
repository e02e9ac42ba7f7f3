"""Who may call what: Triton's restricted APIs and Naiad's bearer keys, for both frontends.

Nothing here knows HTTP or gRPC: each frontend names the API group and scope of the call it is
serving and maps a :class:`~naiad.frontends.access.policy.Denial` to its own status.
"""
