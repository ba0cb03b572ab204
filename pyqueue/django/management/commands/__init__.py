"""The jobq_worker command."""
