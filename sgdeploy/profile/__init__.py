"""What the user writes: launch profiles and the inventory, read with located errors, and their
offline validation against SGLang's catalogs and rules."""
