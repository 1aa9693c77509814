"""Showing results: findings and deployment results as text, JSON and GitHub workflow commands,
and what a change does to each server (diff)."""
