"""Build stages: plain functions run as Ray tasks or Ray Data jobs by swe.build."""
