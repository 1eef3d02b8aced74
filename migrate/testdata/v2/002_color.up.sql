ALTER TABLE widget ADD COLUMN color text;
