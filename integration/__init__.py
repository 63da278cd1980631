"""Spark (RayDP) integration."""
