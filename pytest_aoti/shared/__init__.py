"""What several features (and the debug rerun) use and the compiler does not: the layer between the session glue
and the core. See ARCHITECTURE.md."""
