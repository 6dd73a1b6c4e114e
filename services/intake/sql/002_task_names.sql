-- People look tasks up by name (`cardflow status NAME`, `GET /v1/lookup/task?ref=`): index it.
CREATE INDEX tasks_name ON tasks (name);
