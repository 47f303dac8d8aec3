import { ServerConnection } from '@jupyterlab/services';

import {
  downloadUrl,
  fetchCluster,
  readJobList,
  requestAPI,
  submitJob,
  type ClusterInfo
} from '../api';

/** A fake server: records each request and answers with the given response. */
function fakeServer(answer: (request: Request) => Response): {
  fetch: (input: RequestInfo, init?: RequestInit) => Promise<Response>;
  requests: Request[];
} {
  const requests: Request[] = [];
  return {
    requests,
    fetch: async (input: RequestInfo) => {
      const request = input as Request;
      requests.push(request);
      return answer(request);
    }
  };
}

/** The URL of a request without its query (makeRequest adds a cache buster). */
function pathOf(request: Request): string {
  const url = new URL(request.url);
  return `${url.origin}${url.pathname}`;
}

function json(body: unknown, status = 200, statusText = 'OK'): Response {
  return new Response(JSON.stringify(body), {
    status,
    statusText,
    headers: { 'Content-Type': 'application/json' }
  });
}

const CLUSTER: ClusterInfo = {
  source: 'nvml',
  devices: [
    {
      id: 'gpu0',
      index: 0,
      node: 'lab1',
      uuid: 'GPU-1234',
      name: 'NVIDIA H200',
      memory_total: 150000000000,
      memory_used: 1234,
      utilization: 37,
      virtual: false,
      held: true,
      job_id: 'a1b2c3d4e5f6'
    }
  ]
};

describe('requestAPI', () => {
  it('builds the URL below a non-root base URL', async () => {
    const server = fakeServer(() => json(CLUSTER));
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/user/alice/',
      fetch: server.fetch
    });

    await fetchCluster(settings);

    expect(server.requests).toHaveLength(1);
    expect(pathOf(server.requests[0])).toBe(
      'http://localhost:8888/user/alice/edt/api/v1/cluster'
    );
    expect(server.requests[0].method).toBe('GET');
  });

  it('sends the token of the settings', async () => {
    const server = fakeServer(() => json(CLUSTER));
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      token: 's3cret',
      fetch: server.fetch
    });

    await requestAPI('cluster', {}, settings);

    expect(pathOf(server.requests[0])).toBe(
      'http://localhost:8888/edt/api/v1/cluster'
    );
    expect(server.requests[0].headers.get('Authorization')).toBe(
      'token s3cret'
    );
  });

  it('returns the parsed cluster', async () => {
    const virtual: ClusterInfo = {
      source: 'virtual',
      devices: [
        {
          id: 'gpu0',
          index: 0,
          node: 'lab1',
          uuid: 'virtual-0',
          name: 'Virtual GPU 0',
          memory_total: null,
          memory_used: null,
          utilization: null,
          virtual: true,
          held: false,
          job_id: null
        }
      ]
    };
    const server = fakeServer(() => json(virtual));
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: server.fetch
    });

    await expect(fetchCluster(settings)).resolves.toEqual(virtual);
  });

  it('raises the server message on a non-2xx answer', async () => {
    const server = fakeServer(() =>
      json(
        { message: 'NVML exploded', reason: 'Internal Server Error' },
        500,
        'Internal Server Error'
      )
    );
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: server.fetch
    });

    const error = await fetchCluster(settings).catch(e => e);
    expect(error).toBeInstanceOf(ServerConnection.ResponseError);
    expect(error.message).toBe('NVML exploded');
    expect(error.response.status).toBe(500);
  });

  it('falls back to the reason, then to the status', async () => {
    const reasonOnly = fakeServer(() =>
      json({ reason: 'Forbidden' }, 403, 'Forbidden')
    );
    await expect(
      fetchCluster(
        ServerConnection.makeSettings({
          baseUrl: 'http://localhost:8888/',
          fetch: reasonOnly.fetch
        })
      )
    ).rejects.toThrow('Forbidden');

    const empty = fakeServer(
      () => new Response('', { status: 502, statusText: 'Bad Gateway' })
    );
    await expect(
      fetchCluster(
        ServerConnection.makeSettings({
          baseUrl: 'http://localhost:8888/',
          fetch: empty.fetch
        })
      )
    ).rejects.toThrow('502 Bad Gateway');
  });

  it('raises a NetworkError when the server cannot be reached', async () => {
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: () => Promise.reject(new TypeError('Failed to fetch'))
    });

    await expect(fetchCluster(settings)).rejects.toBeInstanceOf(
      ServerConnection.NetworkError
    );
  });
});

describe('the job calls under a base URL', () => {
  const server = fakeServer(request => {
    const url = new URL(request.url);
    if (url.pathname.endsWith('/jobs') && request.method === 'GET') {
      return json({ jobs: [{ id: 'j1' }], last_event_id: 7 });
    }
    if (url.pathname.endsWith('/jobs') && request.method === 'POST') {
      return json(
        { message: 'max_gpus: must be at least 1', field: 'max_gpus' },
        400,
        'Bad Request'
      );
    }
    return json({
      name: 'w0.log',
      text: 'x',
      offset: 5,
      next_offset: 6,
      size: 6
    });
  });
  const settings = ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/user/alice/',
    wsUrl: 'ws://localhost:8888/user/alice/',
    fetch: server.fetch as typeof fetch
  });

  it('lists jobs by state below the base URL', async () => {
    const list = await readJobList(['RUNNING', 'QUEUED'], settings);
    expect(list).toEqual({ jobs: [{ id: 'j1' }], last_event_id: 7 });
    const request = server.requests[server.requests.length - 1];
    expect(pathOf(request)).toBe(
      'http://localhost:8888/user/alice/edt/api/v1/jobs'
    );
    expect(new URL(request.url).searchParams.getAll('state')).toEqual([
      'RUNNING',
      'QUEUED'
    ]);
  });

  it("reports the server's reason for a refused submission", async () => {
    await expect(
      submitJob({ max_gpus: 0, code: '' }, settings)
    ).rejects.toThrow('max_gpus: must be at least 1');
  });

  it('builds download links with escaped paths, and the token when appended', () => {
    expect(downloadUrl('j1', 'out dir/a#b.pt', settings)).toBe(
      'http://localhost:8888/user/alice/edt/api/v1/jobs/j1/artifacts/out%20dir/a%23b.pt'
    );
    expect(downloadUrl('j1', null, settings)).toBe(
      'http://localhost:8888/user/alice/edt/api/v1/jobs/j1/result.zip'
    );
    const withToken = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      token: 'secret',
      appendToken: true
    });
    expect(downloadUrl('j1', null, withToken)).toBe(
      'http://localhost:8888/edt/api/v1/jobs/j1/result.zip?token=secret'
    );
  });
});
