"""Helpers shared by tests: real servers started on free ports."""
