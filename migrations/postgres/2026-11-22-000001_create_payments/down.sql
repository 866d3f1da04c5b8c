DROP TABLE payments;
DROP TABLE api_keys;
DROP TABLE merchants;
