"""Cards bound to files: binding, loading, evaluation."""
