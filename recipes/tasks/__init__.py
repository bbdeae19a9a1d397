"""Connect-style task distribution over a group of workers (in progress)."""
