"""What operating from the UI does to the files (the jobs that ask for it: cdc_assets/operate/): erasing a record's
data from the files that hold it (`erase_files.py`)."""
