"""What the user writes: profiles, the inventory, and validating them offline."""
