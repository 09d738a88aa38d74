# The stream-dedup worker image.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stream_dedup ./stream_dedup
COPY topics ./topics
RUN pip install --no-cache-dir . && useradd -m dedup && mkdir -p /state && chown dedup /state
ENV STREAM_DEDUP_TOPICS_DIR=/app/topics STREAM_DEDUP_WORKER__STATE_DIR=/state STREAM_DEDUP_WORKER__WEB_HOST=0.0.0.0
USER dedup
EXPOSE 6066
ENTRYPOINT ["stream-dedup"]
CMD ["worker"]
