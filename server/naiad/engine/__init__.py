"""The engine side of frontend workers: it starts them, serves their requests through the data plane,
and keeps their copies of shared state (models, client shared memory, trace and log settings) in line."""
