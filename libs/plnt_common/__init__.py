"""Shared contract of plnt: resources, workflow specs, events, subjects, bus helpers,
settings, logging and metrics.

Every service imports its names from here; no service spells a subject, a bucket or an
event type by hand. This package is not a framework: it holds no service logic.
"""
