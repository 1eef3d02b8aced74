CREATE TABLE widget (id bigint PRIMARY KEY, name text NOT NULL);
