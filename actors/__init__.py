"""Ray actors for raygroups."""
