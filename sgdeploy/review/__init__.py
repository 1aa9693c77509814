"""Showing results: findings and deployment results as text, JSON and GitHub commands, and what a change does (diff)."""
