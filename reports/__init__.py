"""HTML privacy reports."""
