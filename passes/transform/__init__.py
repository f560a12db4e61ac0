"""Graph rewrites: FastT operation splitting and the data-parallel replication of a training graph."""
