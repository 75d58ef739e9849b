"""The reference workload: a small trainer that follows the Kontinue workload contract."""
