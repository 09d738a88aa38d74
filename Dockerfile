# The stream-dedup worker image.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stream_dedup ./stream_dedup
RUN pip install --no-cache-dir . && useradd -m -u 10001 -U dedup && mkdir -p /state && chown dedup /state
ENV STREAM_DEDUP_WORKER__STATE_DIR=/state STREAM_DEDUP_WORKER__WEB_HOST=0.0.0.0
USER 10001
EXPOSE 6066
ENTRYPOINT ["stream-dedup"]
CMD ["worker"]
