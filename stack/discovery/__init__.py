"""Discovery protocols and stores."""
